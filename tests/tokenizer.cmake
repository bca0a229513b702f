# tokenizer tests
