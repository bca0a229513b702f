# cnn tests
