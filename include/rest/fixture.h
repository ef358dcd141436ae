// Fixture models: LLaMA-architecture GGUFs with seeded random weights and a real tokenizer copied from a GGUF that
// has one (llama.cpp's models/ggml-vocab-*.gguf). Tests build tiny ones; benchmarks build TinyLlama-1.1B-shaped
// ones for cost curves. Written through the gguf API, quantized through llama_model_quantize.
#pragma once

#include <cstdint>
#include <string>

namespace rest {

struct fixture_params {
    std::string   vocab = "llama-spm";  // a name under llama.cpp's models/ (ggml-vocab-NAME.gguf) or a GGUF path
    std::int32_t  n_layer   = 2;
    std::int32_t  n_embd    = 64;
    std::int32_t  n_head    = 4;
    std::int32_t  n_head_kv = 2;
    std::int32_t  n_ff      = 128;
    std::int32_t  n_ctx     = 1024;       // llama.context_length
    std::uint32_t seed      = 1;
    std::string   type      = "f32";      // f32 | f16 | q8_0 | q4_0
    // Scale of the output matrix relative to 1/sqrt(n_embd): large values make logits peaky, so random models
    // rarely produce near-ties, and greedy output is stable under batched-decode rounding.
    float         output_scale = 8.0f;

    static fixture_params tinyllama_1b() {
        fixture_params p;
        p.n_layer = 22; p.n_embd = 2048; p.n_head = 32; p.n_head_kv = 4; p.n_ff = 5632; p.n_ctx = 2048;
        p.type = "q8_0";
        return p;
    }
};

// The directory holding llama.cpp's ggml-vocab-*.gguf files of the llama.cpp this build uses.
std::string fixture_vocab_dir();
// Resolves fixture_params::vocab to a file path. Throws user_error when missing.
std::string fixture_vocab_path(const std::string & vocab);

// Writes the model atomically. Throws user_error on bad parameters or I/O failure.
void write_fixture_model(const std::string & path, const fixture_params & params);

}  // namespace rest
