rest_add_test(test-decode-lossless SOURCES test-decode-lossless.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-costs SOURCES test-decode-costs.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-budget SOURCES test-decode-budget.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-trace SOURCES test-decode-trace.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-steps SOURCES test-decode-steps.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-online SOURCES test-decode-online.cpp LIBS rest-core LABELS decode)
rest_add_test(test-decode-slots SOURCES test-decode-slots.cpp LIBS rest-core LABELS decode)
# Its fake passes take busy-waited wall time that the budget measures: sharing the 2 CPUs with another test's
# llama.cpp threads inflates those times at random (two busy loops beside it: 8 of 12 runs failed, before and after
# the tree-shape change alike), so it runs alone. It takes about a second.
set_tests_properties(test-decode-online PROPERTIES RUN_SERIAL TRUE)
rest_add_test(test-decode-prefill SOURCES test-decode-prefill.cpp LIBS rest-core LABELS decode)
