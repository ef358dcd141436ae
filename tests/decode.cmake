rest_add_test(test-decode-lossless SOURCES test-decode-lossless.cpp LIBS rest-core LABELS decode)
