# Datastore (issue 3). Core tests use synthetic token documents or a byte-level fake tokenizer: no model needed.
rest_add_test(test-index-sort   SOURCES test-index-sort.cpp   LIBS rest-core LABELS index)
rest_add_test(test-index-lookup SOURCES test-index-lookup.cpp LIBS rest-core LABELS index)
rest_add_test(test-index-file   SOURCES test-index-file.cpp   LIBS rest-core LABELS index)
rest_add_test(test-index-append SOURCES test-index-append.cpp LIBS rest-core LABELS index)
rest_add_test(test-index-corpus SOURCES test-index-corpus.cpp LIBS rest-core LABELS index)

# With real llama.cpp tokenizers (vocab-only GGUFs from the pinned llama.cpp's models/, stories260K from shared data).
rest_add_test(test-index-tokenizer SOURCES test-index-tokenizer.cpp LIBS rest-llama LABELS index llama)
target_compile_definitions(test-index-tokenizer PRIVATE REST_LLAMA_SOURCE="${RESTCPP_LLAMA_SOURCE}")

# The `rest index` CLI on bad input; runs $REST_BIN/rest, so build the rest-cli target (the default `all`) first.
rest_add_test(test-index-cli SOURCES test-index-cli.cpp LIBS rest-core LABELS index cli)
target_compile_definitions(test-index-cli PRIVATE REST_LLAMA_SOURCE="${RESTCPP_LLAMA_SOURCE}")
rest_add_test(test-index-garbage SOURCES test-index-garbage.cpp LIBS rest-llama LABELS index llama)
