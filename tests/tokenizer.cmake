# GPT-2 BPE tokenizer: the C++ encoder against the JS reference (skipped without node or the
# tokenizer files from io/get_gpt2_tokenizer.sh), and token files through tokenize/train/eval/
# generate. The unit tests (tests/test_bpe_tokenizer.cpp) are registered by the test_*.cpp glob.
mpitron_e2e_test(bpe_vs_js bpe_vs_js.sh unit 600)
mpitron_e2e_test(tokenize_train_eval tokenize.sh unit 300)
