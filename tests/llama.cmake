rest_add_test(test-llama-adapter SOURCES test-llama-adapter.cpp LIBS rest-llama LABELS llama)
