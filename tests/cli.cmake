# `rest bench` end to end on fixture models; runs $REST_BIN/rest, so build the rest-cli target first.
rest_add_test(test-cli-bench SOURCES test-cli-bench.cpp LIBS rest-llama LABELS cli)
