# Datastore (issue 3): micro-benchmarks on synthetic corpora, and the latency tool index-scale.sh runs on a real index.
add_executable(bench-index bench-index.cpp)
target_include_directories(bench-index PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(bench-index PRIVATE rest-core benchmark::benchmark benchmark::benchmark_main)

add_executable(bench-index-lookup bench-index-lookup.cpp)
target_link_libraries(bench-index-lookup PRIVATE rest-core)

# The same tool without the bound on positions read from the file (src/CMakeLists.txt: rest-core-unchecked), for the
# checks' cost, interleaved with bench-index-lookup on the same index: ninja bench-index-lookup-unchecked.
add_executable(bench-index-lookup-unchecked EXCLUDE_FROM_ALL bench-index-lookup.cpp)
target_link_libraries(bench-index-lookup-unchecked PRIVATE rest-core-unchecked)
