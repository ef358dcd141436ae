set(REST_DECODE_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/decoder.cpp
    ${CMAKE_CURRENT_LIST_DIR}/cost-model.cpp
    ${CMAKE_CURRENT_LIST_DIR}/calibrate.cpp
    ${CMAKE_CURRENT_LIST_DIR}/online-budget.cpp
    ${CMAKE_CURRENT_LIST_DIR}/logprobs.cpp
    ${CMAKE_CURRENT_LIST_DIR}/slot-batch.cpp
)
