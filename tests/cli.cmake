# `rest bench` end to end on fixture models; runs $REST_BIN/rest, so build the rest-cli target first.
rest_add_test(test-cli-bench SOURCES test-cli-bench.cpp LIBS rest-llama LABELS cli)
# --draft-layout auto's cached tree step (apps/cost-cache.cpp) on a fixture model whose cached chain table is made flat:
# measured and cached once, a cached ratio keeps trees (<= 2) or chains (> 2), a malformed line is measured again.
add_test(NAME test-layout-tree-step COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/layout-tree-step.sh
         ${CMAKE_BINARY_DIR}/bin/rest ${CMAKE_BINARY_DIR}/test-tmp)
set_tests_properties(test-layout-tree-step PROPERTIES LABELS "cli" TIMEOUT 120)
