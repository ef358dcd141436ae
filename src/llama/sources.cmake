set(REST_LLAMA_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/llama-util.cpp
    ${CMAKE_CURRENT_LIST_DIR}/llama-tokenizer.cpp
    ${CMAKE_CURRENT_LIST_DIR}/llama-context.cpp
    ${CMAKE_CURRENT_LIST_DIR}/llama-sampler.cpp
    ${CMAKE_CURRENT_LIST_DIR}/llama-model.cpp
    ${CMAKE_CURRENT_LIST_DIR}/fixture-model.cpp
)
