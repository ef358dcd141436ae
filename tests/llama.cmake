rest_add_test(test-llama-adapter SOURCES test-llama-adapter.cpp LIBS rest-llama LABELS llama)
rest_add_test(test-llama-verify SOURCES test-llama-verify.cpp LIBS rest-llama LABELS llama)
rest_add_test(test-llama-sampling SOURCES test-llama-sampling.cpp LIBS rest-llama LABELS llama)
rest_add_test(test-llama-rest-e2e SOURCES test-llama-rest-e2e.cpp LIBS rest-llama LABELS llama)
rest_add_test(test-llama-prediction SOURCES test-llama-prediction.cpp ${PROJECT_SOURCE_DIR}/apps/bench/edit-workload.cpp LIBS rest-llama LABELS llama)
rest_add_test(test-cli-generate SOURCES test-cli-generate.cpp ${PROJECT_SOURCE_DIR}/apps/llama-args.cpp LIBS rest-llama LABELS cli)
target_include_directories(test-cli-generate PRIVATE ${PROJECT_SOURCE_DIR}/apps)

# -DRESTCPP_LLAMA_DIR with a plain llama.cpp checkout (the cached pinned clone): configure, build, generate.
add_test(NAME test-llama-dir-build COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/llama-dir-build.sh
         ${PROJECT_SOURCE_DIR} ${RESTCPP_LLAMA_SOURCE} ${CMAKE_BINARY_DIR}/test-tmp)
set_tests_properties(test-llama-dir-build PROPERTIES LABELS "build;slow" TIMEOUT 1800)
rest_add_test(test-llama-sampling-real SOURCES test-llama-sampling-real.cpp LIBS rest-llama LABELS llama)
# Layers on two llama.cpp rpc-server processes over loopback (--rpc): same output and M as the local run.
if (TARGET ggml-rpc-server)
    rest_add_test(test-cli-rpc SOURCES test-cli-rpc.cpp LIBS rest-llama LABELS cli)
    add_dependencies(test-cli-rpc rest-cli ggml-rpc-server)
endif()
