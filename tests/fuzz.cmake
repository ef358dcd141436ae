# The index fuzzer's CTest side: fuzz-index.cpp's target replayed over seeds, garbage variants and found crashers
# (the long libFuzzer run is scripts/fuzz-index.sh: clang, ASan + UBSan).
add_executable(test-fuzz-index-replay fuzz/fuzz-replay.cpp fuzz/fuzz-index.cpp)
target_link_libraries(test-fuzz-index-replay PRIVATE rest-core)
target_include_directories(test-fuzz-index-replay PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_test(NAME test-fuzz-index-replay COMMAND test-fuzz-index-replay ${CMAKE_BINARY_DIR}/test-tmp
         ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/crashers)
set_tests_properties(test-fuzz-index-replay PROPERTIES LABELS index TIMEOUT 300)
