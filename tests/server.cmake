# `rest serve` (apps/server/): unit tests of its pure parts, HTTP integration tests against the real binary, a
# real OpenAI client (npm `openai`, skipped without npm), and a bounded load test (skipped without python3).
rest_add_test(test-server-unit SOURCES test-server-unit.cpp ${PROJECT_SOURCE_DIR}/apps/llama-args.cpp LIBS rest-server
              LABELS server TIMEOUT 60)
target_include_directories(test-server-unit PRIVATE ${PROJECT_SOURCE_DIR}/apps)
# Chat rendering against llama.cpp's `common` called directly (as llama-server calls it), and `rest serve` on it.
rest_add_test(test-server-chat SOURCES test-server-chat.cpp LIBS rest-server llama-common LABELS server TIMEOUT 240)
rest_add_test(test-server-api SOURCES test-server-api.cpp LIBS rest-server LABELS server TIMEOUT 240)
rest_add_test(test-server-lifecycle SOURCES test-server-lifecycle.cpp LIBS rest-server LABELS server TIMEOUT 240)
rest_add_test(test-server-history SOURCES test-server-history.cpp LIBS rest-server LABELS server TIMEOUT 240)
rest_add_test(test-server-corpora SOURCES test-server-corpora.cpp LIBS rest-server LABELS server TIMEOUT 240)
add_dependencies(test-server-corpora rest-cli)
add_dependencies(test-server-api rest-cli)
add_dependencies(test-server-lifecycle rest-cli)
add_dependencies(test-server-history rest-cli)
add_dependencies(test-server-chat rest-cli)

set(_rest_server_env "REST_SHARED_DATA=${REST_SHARED_DATA_DIR};REST_BIN=${CMAKE_BINARY_DIR}/bin;REST_TEST_TMP=${CMAKE_BINARY_DIR}/test-tmp;RESTCPP_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache")
add_test(NAME test-server-openai-client COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/openai-client/run.sh)
set_tests_properties(test-server-openai-client PROPERTIES LABELS server TIMEOUT 300 SKIP_RETURN_CODE 77
    ENVIRONMENT "${_rest_server_env}")
find_program(REST_PYTHON3 python3)
if (REST_PYTHON3)
    # The full run (1,000 requests) is `bench/server-load.py --rest-bin build/bin/rest`; CTest runs a smaller one.
    add_test(NAME test-server-load COMMAND ${REST_PYTHON3} ${PROJECT_SOURCE_DIR}/bench/server-load.py
        --rest-bin ${CMAKE_BINARY_DIR}/bin/rest --requests 400 --concurrency 16 --time-limit 200)
    set_tests_properties(test-server-load PROPERTIES LABELS server TIMEOUT 300 ENVIRONMENT "${_rest_server_env}")
    # scripts/serve-replicas.sh: two replicas behind nginx, one SIGKILLed mid-load (skipped without nginx).
    add_test(NAME test-serve-replicas COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test-serve-replicas.sh)
    set_tests_properties(test-serve-replicas PROPERTIES LABELS server TIMEOUT 300 SKIP_RETURN_CODE 77
        ENVIRONMENT "${_rest_server_env}")
endif()
rest_add_test(test-server-cache SOURCES test-server-cache.cpp LIBS rest-server LABELS server TIMEOUT 300)
add_dependencies(test-server-cache rest-cli)
