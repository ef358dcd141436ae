#include "rest/fixture.h"

#include "gguf.h"
#include "llama-util.h"

#include <cmath>
#include <cstring>
#include <cstdio>
#include <unistd.h>
#include <filesystem>
#include <random>
#include <vector>

namespace rest {

namespace {

struct tensor_spec {
    std::string          name;
    int64_t              ne0, ne1;  // ne1 == 1 for vectors
    std::vector<uint8_t> data;
};

// Uniform weights with the requested standard deviation: cheap enough for 1.1B parameters.
void fill_uniform(std::vector<float> & out, std::mt19937_64 & rng, float stddev) {
    const float a = stddev * std::sqrt(3.0f);
    std::uniform_real_distribution<float> dist(-a, a);
    for (auto & v : out) {
        v = dist(rng);
    }
}

void check_params(const fixture_params & p) {
    auto bad = [](const std::string & what) { throw user_error("fixture: " + what); };
    if (p.n_layer < 1 || p.n_embd < 8 || p.n_head < 1 || p.n_head_kv < 1 || p.n_ff < 1 || p.n_ctx < 8) {
        bad("every dimension must be positive (n_embd >= 8, n_ctx >= 8)");
    }
    if (p.n_embd % p.n_head != 0 || p.n_head % p.n_head_kv != 0) {
        bad("n_embd must be a multiple of n_head, and n_head of n_head_kv");
    }
    if ((p.n_embd / p.n_head) % 2 != 0) {
        bad("the head dimension must be even (RoPE)");
    }
    if (p.type != "f32" && p.type != "f16" && p.type != "q8_0" && p.type != "q4_0") {
        bad("type must be one of f32, f16, q8_0, q4_0 (got '" + p.type + "')");
    }
    if ((p.type == "q8_0" || p.type == "q4_0") && (p.n_embd % 32 != 0 || p.n_ff % 32 != 0)) {
        bad("quantized fixtures need n_embd and n_ff to be multiples of 32");
    }
}

}  // namespace

std::string fixture_vocab_dir() {
    return REST_LLAMA_MODELS_DIR;
}

std::string fixture_vocab_path(const std::string & vocab) {
    namespace fs = std::filesystem;
    if (vocab.find('/') != std::string::npos || vocab.ends_with(".gguf")) {
        if (!fs::exists(vocab)) {
            throw user_error("fixture: vocabulary file '" + vocab + "' does not exist");
        }
        return vocab;
    }
    const std::string path = fixture_vocab_dir() + "/ggml-vocab-" + vocab + ".gguf";
    if (!fs::exists(path)) {
        throw user_error("fixture: no vocabulary '" + vocab + "' (looked for " + path + ")");
    }
    return path;
}

void write_fixture_model(const std::string & path, const fixture_params & p) {
    check_params(p);
    llama_ensure_backend();
    const std::string vocab_path = fixture_vocab_path(p.vocab);

    gguf_init_params vip = {true, nullptr};
    gguf_context *   vocab_ctx = gguf_init_from_file(vocab_path.c_str(), vip);
    if (!vocab_ctx) {
        throw user_error("fixture: cannot read vocabulary GGUF '" + vocab_path + "'");
    }
    const int64_t tok_key = gguf_find_key(vocab_ctx, "tokenizer.ggml.tokens");
    if (tok_key < 0) {
        gguf_free(vocab_ctx);
        throw user_error("fixture: '" + vocab_path + "' has no tokenizer");
    }
    const int64_t n_vocab = (int64_t) gguf_get_arr_n(vocab_ctx, tok_key);

    gguf_context * g = gguf_init_empty();
    gguf_set_kv(g, vocab_ctx);
    gguf_free(vocab_ctx);
    // Keep only the tokenizer's keys from the vocabulary file; the rest describes us.
    for (int64_t i = gguf_get_n_kv(g) - 1; i >= 0; --i) {
        const std::string key = gguf_get_key(g, i);
        if (!key.starts_with("tokenizer.")) {
            gguf_remove_key(g, key.c_str());
        }
    }
    const int32_t head_dim = p.n_embd / p.n_head;
    const bool    f16      = p.type != "f32";  // quantized types start from f16, then llama_model_quantize
    gguf_set_val_str(g, "general.architecture", "llama");
    gguf_set_val_str(g, "general.name", "rest.cpp fixture");
    gguf_set_val_u32(g, "general.file_type", f16 ? 1 : 0);
    gguf_set_val_u32(g, "llama.context_length", p.n_ctx);
    gguf_set_val_u32(g, "llama.embedding_length", p.n_embd);
    gguf_set_val_u32(g, "llama.block_count", p.n_layer);
    gguf_set_val_u32(g, "llama.feed_forward_length", p.n_ff);
    gguf_set_val_u32(g, "llama.attention.head_count", p.n_head);
    gguf_set_val_u32(g, "llama.attention.head_count_kv", p.n_head_kv);
    gguf_set_val_u32(g, "llama.rope.dimension_count", head_dim);
    gguf_set_val_f32(g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_set_val_f32(g, "llama.rope.freq_base", 10000.0f);
    gguf_set_val_u32(g, "llama.vocab_size", (uint32_t) n_vocab);

    const int64_t n_embd_kv = (int64_t) head_dim * p.n_head_kv;
    std::vector<tensor_spec> specs;
    specs.push_back({"token_embd.weight", p.n_embd, n_vocab, {}});
    for (int il = 0; il < p.n_layer; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        specs.push_back({b + "attn_norm.weight", p.n_embd, 1, {}});
        specs.push_back({b + "attn_q.weight", p.n_embd, p.n_embd, {}});
        specs.push_back({b + "attn_k.weight", p.n_embd, n_embd_kv, {}});
        specs.push_back({b + "attn_v.weight", p.n_embd, n_embd_kv, {}});
        specs.push_back({b + "attn_output.weight", p.n_embd, p.n_embd, {}});
        specs.push_back({b + "ffn_norm.weight", p.n_embd, 1, {}});
        specs.push_back({b + "ffn_gate.weight", p.n_embd, p.n_ff, {}});
        specs.push_back({b + "ffn_up.weight", p.n_embd, p.n_ff, {}});
        specs.push_back({b + "ffn_down.weight", p.n_ff, p.n_embd, {}});
    }
    specs.push_back({"output_norm.weight", p.n_embd, 1, {}});
    specs.push_back({"output.weight", p.n_embd, n_vocab, {}});

    ggml_init_params ip = {ggml_tensor_overhead() * (specs.size() + 8), nullptr, true};
    ggml_context *   meta = ggml_init(ip);
    std::mt19937_64  rng(p.seed);
    std::vector<float> row;
    for (auto & s : specs) {
        const bool  vec  = s.ne1 == 1;
        const ggml_type type = vec || !f16 ? GGML_TYPE_F32 : GGML_TYPE_F16;
        ggml_tensor * t = vec ? ggml_new_tensor_1d(meta, type, s.ne0) : ggml_new_tensor_2d(meta, type, s.ne0, s.ne1);
        ggml_set_name(t, s.name.c_str());
        const size_t n = (size_t) s.ne0 * s.ne1;
        row.resize(n);
        if (vec) {
            std::fill(row.begin(), row.end(), 1.0f);  // RMS norm gains
        } else {
            float stddev = 1.0f / std::sqrt((float) s.ne0);
            if (s.name == "token_embd.weight") {
                stddev = 1.0f;
            } else if (s.name == "output.weight") {
                stddev *= p.output_scale;
            }
            fill_uniform(row, rng, stddev);
        }
        s.data.resize(ggml_nbytes(t));
        if (type == GGML_TYPE_F16) {
            ggml_fp32_to_fp16_row(row.data(), reinterpret_cast<ggml_fp16_t *>(s.data.data()), (int64_t) n);
        } else {
            std::memcpy(s.data.data(), row.data(), n * sizeof(float));
        }
        gguf_add_tensor(g, t);
        gguf_set_tensor_data(g, s.name.c_str(), s.data.data());
    }
    row.clear();
    row.shrink_to_fit();

    const bool        quantize = p.type == "q8_0" || p.type == "q4_0";
    // Per-process temporary names: tests running in parallel may write the same fixture at once (rename is atomic).
    const std::string part     = path + "." + std::to_string((long) ::getpid());
    const std::string tmp      = part + (quantize ? ".f16.tmp" : ".tmp");
    const bool        ok       = gguf_write_to_file(g, tmp.c_str(), false);
    gguf_free(g);
    ggml_free(meta);
    specs.clear();
    if (!ok) {
        std::remove(tmp.c_str());
        throw user_error("fixture: cannot write '" + tmp + "'");
    }
    if (quantize) {
        llama_model_quantize_params qp = llama_model_quantize_default_params();
        qp.ftype = p.type == "q8_0" ? LLAMA_FTYPE_MOSTLY_Q8_0 : LLAMA_FTYPE_MOSTLY_Q4_0;
        const std::string qtmp = part + ".tmp";
        const uint32_t rc = llama_model_quantize(tmp.c_str(), qtmp.c_str(), &qp);
        std::remove(tmp.c_str());
        if (rc != 0) {
            std::remove(qtmp.c_str());
            throw user_error("fixture: llama_model_quantize to " + p.type + " failed: " + llama_last_error());
        }
        std::filesystem::rename(qtmp, path);
    } else {
        std::filesystem::rename(tmp, path);
    }
}

}  // namespace rest
