# Draft micro-benchmarks. bench-draft-corpus builds their datastores from real code with a vocabulary GGUF:
#   bench-draft-corpus -m ~/.cache/rest.cpp/llama.cpp-80fb11a/models/ggml-vocab-llama-spm.gguf \
#       -o <build>/bench-data/draft /usr/include /usr/lib/python3 /usr/lib/python3.11 /usr/share/fpcsrc \
#       --ood /usr/share/perl /usr/lib/x86_64-linux-gnu/perl
#   bench-draft --benchmark_counters_tabular=true
add_executable(bench-draft bench-draft.cpp)
target_link_libraries(bench-draft PRIVATE rest-core benchmark::benchmark)
target_compile_definitions(bench-draft PRIVATE REST_BENCH_DEFAULT_DATA="${CMAKE_BINARY_DIR}/bench-data")

add_executable(bench-draft-corpus draft-corpus.cpp)
target_link_libraries(bench-draft-corpus PRIVATE rest-llama rest-core)
target_link_libraries(bench-draft-corpus PRIVATE ${XXHASH_LIB})

# Offline acceptance estimate (no verifier): replays recorded greedy outputs against the draft trees.
#   rest generate -m stories260K.gguf -f tinystories-B.jsonl --field prompt --no-spec --json -n 128 > gen.jsonl
#   bench-draft-acceptance -m stories260K.gguf --index A.idx --prompts tinystories-B.jsonl --generations gen.jsonl
add_executable(bench-draft-acceptance draft-acceptance.cpp)
target_link_libraries(bench-draft-acceptance PRIVATE rest-llama rest-core)

# Which source predicts the target's greedy next token, by suffix-match length (the ceiling of re-ranking).
#   bench-draft-sources -m stories260K.gguf --index A.idx --prompts tinystories-B.jsonl --generations gen.jsonl
add_executable(bench-draft-sources draft-sources.cpp)
target_link_libraries(bench-draft-sources PRIVATE rest-llama rest-core)

# Budget policies replayed against recorded greedy outputs on a fixed cost model (no timing noise).
#   bench-policy-replay -m stories260K.gguf --index A.idx --prompts tinystories-B.jsonl --generations gen.jsonl \
#       --costs ~/.cache/rest.cpp/costs/<model>.txt
add_executable(bench-policy-replay policy-replay.cpp)
target_link_libraries(bench-policy-replay PRIVATE rest-llama rest-core)

# Verify cost by batch shape (graph reuse vs rebuild) on a real model; see the file's header.
add_executable(bench-verify-shapes bench-verify-shapes.cpp)
target_link_libraries(bench-verify-shapes PRIVATE rest-llama rest-core benchmark::benchmark)
target_compile_definitions(bench-verify-shapes PRIVATE REST_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# The draft step on a real index in a fresh process: the first steps (cold, optionally with the index evicted from
# the page cache) apart from the warm steps' percentiles (issue 20's scale figures).
#   bench-draft-index -m MODEL.gguf --index IDX --evict FILE...
add_executable(bench-draft-index draft-index.cpp)
target_link_libraries(bench-draft-index PRIVATE rest-llama rest-core)
