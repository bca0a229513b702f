# pretrained tests
