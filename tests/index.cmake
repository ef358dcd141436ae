# Datastore (issue 3). Core tests use synthetic token documents or a byte-level fake tokenizer: no model needed.
rest_add_test(test-index-sort   SOURCES test-index-sort.cpp   LIBS rest-core LABELS index)
rest_add_test(test-index-lookup SOURCES test-index-lookup.cpp LIBS rest-core LABELS index)
rest_add_test(test-index-file   SOURCES test-index-file.cpp   LIBS rest-core LABELS index)
rest_add_test(test-index-corpus SOURCES test-index-corpus.cpp LIBS rest-core LABELS index)
