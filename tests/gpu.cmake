# bench/gpu-check.sh (docs/gpu.md) through its --dry-run: refuses to run without a llama.cpp source tree, prints a
# CUDA configure line that fetches nothing, creates nothing. Needs no GPU; the pinned checkout stands in.
add_test(NAME test-gpu-check-dry-run COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu-check-dry-run.sh
         ${PROJECT_SOURCE_DIR} ${RESTCPP_LLAMA_SOURCE} ${CMAKE_BINARY_DIR}/test-tmp)
set_tests_properties(test-gpu-check-dry-run PROPERTIES LABELS "cli" TIMEOUT 60)
# bench/gpu-bundle.sh's pack + unpack on a fake build, in a fake checkout under test-tmp: the paths a prebuilt CUDA
# build needs on a GPU machine, the refusals, and no library added that the machine already has.
add_test(NAME test-gpu-bundle-roundtrip COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpu-bundle-roundtrip.sh
         ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/test-tmp)
set_tests_properties(test-gpu-bundle-roundtrip PROPERTIES LABELS "cli" TIMEOUT 60)
# bench/trace-costs.py (a budget trace from a GPU run turned into bench-policy-replay's --true-costs, jitter and cold
# pass) on synthetic traces of a known machine.
add_test(NAME test-trace-costs COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/trace-costs.sh ${PROJECT_SOURCE_DIR}
         ${CMAKE_BINARY_DIR}/test-tmp)
set_tests_properties(test-trace-costs PROPERTIES LABELS "cli" TIMEOUT 60)
