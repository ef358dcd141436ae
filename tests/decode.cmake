rest_add_test(test-decode-lossless SOURCES test-decode-lossless.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-costs SOURCES test-decode-costs.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-budget SOURCES test-decode-budget.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-steps SOURCES test-decode-steps.cpp LIBS rest-core LABELS decode)
