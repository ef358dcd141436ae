rest_add_test(test-llama-adapter SOURCES test-llama-adapter.cpp LIBS rest-llama LABELS llama)
rest_add_test(test-llama-verify SOURCES test-llama-verify.cpp LIBS rest-llama LABELS llama)
rest_add_test(test-llama-sampling SOURCES test-llama-sampling.cpp LIBS rest-llama LABELS llama)
rest_add_test(test-llama-rest-e2e SOURCES test-llama-rest-e2e.cpp LIBS rest-llama LABELS llama)
