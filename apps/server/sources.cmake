# `rest serve` (apps/server/): a static library linked into the rest CLI, and into the server's unit tests.
# Debian's cpp-httplib is a compiled library whose header layout depends on the feature macros it was built with;
# its pkg-config file carries them, so link through pkg-config rather than the bare header.
find_package(PkgConfig REQUIRED)
pkg_check_modules(REST_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)

add_library(rest-server STATIC
    ${CMAKE_CURRENT_LIST_DIR}/conn-probe.cpp
    ${CMAKE_CURRENT_LIST_DIR}/corpora.cpp
    ${CMAKE_CURRENT_LIST_DIR}/engine.cpp
    ${CMAKE_CURRENT_LIST_DIR}/foreign-fields.cpp
    ${CMAKE_CURRENT_LIST_DIR}/history-persist.cpp
    ${CMAKE_CURRENT_LIST_DIR}/http-util.cpp
    ${CMAKE_CURRENT_LIST_DIR}/job.cpp
    ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
    ${CMAKE_CURRENT_LIST_DIR}/oai-request.cpp
    ${CMAKE_CURRENT_LIST_DIR}/oai-response.cpp
    ${CMAKE_CURRENT_LIST_DIR}/routes-completion.cpp
    ${CMAKE_CURRENT_LIST_DIR}/routes-corpora.cpp
    ${CMAKE_CURRENT_LIST_DIR}/routes-info.cpp
    ${CMAKE_CURRENT_LIST_DIR}/routes-tokens.cpp
    ${CMAKE_CURRENT_LIST_DIR}/server-budget.cpp
    ${CMAKE_CURRENT_LIST_DIR}/server-prompt.cpp
    ${CMAKE_CURRENT_LIST_DIR}/server.cpp
    ${CMAKE_CURRENT_LIST_DIR}/text-stream.cpp
    ${CMAKE_CURRENT_LIST_DIR}/token-request.cpp
)
target_compile_features(rest-server PUBLIC cxx_std_20)
target_compile_options(rest-server PRIVATE -Wall -Wextra)
target_include_directories(rest-server PUBLIC ${CMAKE_CURRENT_LIST_DIR})
# Debian's httplib first on the link line: rest-llama brings llama.cpp's `common`, which links llama.cpp's own
# vendored cpp-httplib (a static library of another version). Were that archive first, its httplib::Server would
# be linked into code compiled against Debian's header (a different layout: heap corruption at start-up).
target_link_libraries(rest-server PUBLIC PkgConfig::REST_HTTPLIB rest-llama rest-core Threads::Threads)
