# Exactness (issue 22): the strict comparison itself; quantized fixtures through speculation in both layouts.
rest_add_test(test-exactness SOURCES test-exactness.cpp LIBS rest-llama LABELS decode)
rest_add_test(test-llama-exact-quantized SOURCES test-llama-exact-quantized.cpp LIBS rest-llama LABELS llama)
