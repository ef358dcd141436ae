# Draft trees and sources (src/draft): unit tests against the naive references in tests/ref/ref-draft.h.
rest_add_test(test-draft-tree    SOURCES test-draft-tree.cpp    LIBS rest-core LABELS draft)
rest_add_test(test-draft-search  SOURCES test-draft-search.cpp  LIBS rest-core LABELS draft)
rest_add_test(test-draft-expand  SOURCES test-draft-expand.cpp  LIBS rest-core LABELS draft)
rest_add_test(test-draft-drafter SOURCES test-draft-drafter.cpp LIBS rest-core LABELS draft)
rest_add_test(test-draft-chain   SOURCES test-draft-chain.cpp   LIBS rest-core LABELS draft)
rest_add_test(test-draft-history SOURCES test-draft-history.cpp LIBS rest-core LABELS draft)
rest_add_test(test-draft-prediction SOURCES test-draft-prediction.cpp ${PROJECT_SOURCE_DIR}/apps/bench/edit-workload.cpp LIBS rest-core LABELS draft)
