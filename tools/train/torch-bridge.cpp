// The C++ half of the PyTorch training route: llama.cpp tokenizes the corpus (so the model trains on exactly the
// tokens it will see), PyTorch trains, and the weights come back into the GGUF that `rest-train init` wrote (same
// names, shapes and metadata). heldout_loss() then scores the result with llama.cpp's own forward pass.
#include "train.h"

#include "rest/types.h"

#include "ggml.h"
#include "llama.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

namespace rest::train {

namespace {

struct model_deleter {
    void operator()(llama_model * m) const { llama_model_free(m); }
};
using model_ptr = std::unique_ptr<llama_model, model_deleter>;

model_ptr load(const std::string & path, bool vocab_only) {
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only         = vocab_only;
    model_ptr m(llama_model_load_from_file(path.c_str(), mp));
    if (!m) {
        throw user_error("cannot load model '" + path + "'");
    }
    return m;
}

}  // namespace

void export_tokens(const std::string & model, const std::string & files, const std::string & out) {
    const model_ptr m = load(model, true);
    std::size_t     n_bytes = 0;
    const auto      tokens  = tokenize_files(llama_model_get_vocab(m.get()), files, n_bytes);
    if (llama_vocab_n_tokens(llama_model_get_vocab(m.get())) > 65536) {
        throw user_error("tokens: the vocabulary does not fit u16");
    }
    std::vector<std::uint16_t> u16(tokens.begin(), tokens.end());
    const std::string tmp = out + ".tmp";
    std::ofstream     f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char *>(u16.data()), (std::streamsize) (u16.size() * 2));
    if (!f.flush()) {
        throw user_error("tokens: cannot write '" + tmp + "'");
    }
    f.close();
    std::filesystem::rename(tmp, out);
    std::printf("tokens: %zu tokens from %zu bytes (%.2f bytes/token) -> %s\n", tokens.size(), n_bytes,
                (double) n_bytes / (double) std::max<std::size_t>(1, tokens.size()), out.c_str());
}

void import_weights(const std::string & model, const std::string & dir, const std::string & out) {
    std::size_t n = 0;
    edit_f32_tensors(model, out, [&](const std::string & name, ggml_tensor * t) {
        const std::string path = dir + "/" + name + ".f32";
        std::ifstream     f(path, std::ios::binary | std::ios::ate);
        if (!f) {
            throw user_error("import: missing " + path);
        }
        if ((std::size_t) f.tellg() != ggml_nbytes(t)) {
            throw user_error("import: " + path + " holds " + std::to_string((long long) f.tellg()) + " bytes, " +
                             name + " needs " + std::to_string(ggml_nbytes(t)));
        }
        f.seekg(0);
        f.read(static_cast<char *>(t->data), (std::streamsize) ggml_nbytes(t));
        ++n;
    });
    std::printf("import: %zu tensors from %s -> %s\n", n, dir.c_str(), out.c_str());
}

double heldout_loss(const std::string & model, const std::string & files, std::int32_t n_ctx, std::int32_t n_threads) {
    const model_ptr     m     = load(model, false);
    const llama_vocab * vocab = llama_model_get_vocab(m.get());
    std::size_t         n_bytes = 0;
    const auto          tokens  = tokenize_files(vocab, files, n_bytes);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx     = cp.n_batch = cp.n_ubatch = (std::uint32_t) n_ctx;
    cp.n_threads = cp.n_threads_batch = n_threads;
    std::unique_ptr<llama_context, decltype(&llama_free)> ctx(llama_init_from_model(m.get(), cp), &llama_free);
    if (!ctx) {
        throw user_error("eval: cannot create a context of " + std::to_string(n_ctx) + " tokens");
    }
    const std::int32_t n_vocab = llama_vocab_n_tokens(vocab);
    double             sum     = 0;
    std::size_t        n_pred  = 0;
    // The training script's windows: non-overlapping, each predicting its n_ctx next tokens.
    struct batch_owner {
        llama_batch b;
        ~batch_owner() { llama_batch_free(b); }
    } owner{llama_batch_init(n_ctx, 0, 1)};
    for (std::size_t s = 0; s + (std::size_t) n_ctx + 1 <= tokens.size(); s += (std::size_t) n_ctx) {
        llama_memory_clear(llama_get_memory(ctx.get()), true);
        llama_batch & b = owner.b;
        b.n_tokens      = n_ctx;
        for (std::int32_t i = 0; i < n_ctx; ++i) {  // every position's logits
            b.token[i]     = tokens[s + i];
            b.pos[i]       = i;
            b.n_seq_id[i]  = 1;
            b.seq_id[i][0] = 0;
            b.logits[i]    = 1;
        }
        if (llama_decode(ctx.get(), b) != 0) {
            throw user_error("eval: llama_decode failed");
        }
        for (std::int32_t i = 0; i < n_ctx; ++i) {
            const float * l  = llama_get_logits_ith(ctx.get(), i);
            float         mx = l[0];
            for (std::int32_t v = 1; v < n_vocab; ++v) mx = std::max(mx, l[v]);
            double z = 0;
            for (std::int32_t v = 0; v < n_vocab; ++v) z += std::exp((double) (l[v] - mx));
            sum += std::log(z) + mx - l[tokens[s + i + 1]];
            ++n_pred;
        }
    }
    if (n_pred == 0) {
        throw user_error("eval: the files hold fewer tokens than one window");
    }
    const double loss = sum / (double) n_pred;
    std::printf("eval: %zu tokens in %zu windows of %d: %.4f nats/token, %.3f bits/byte\n", n_pred,
                n_pred / (std::size_t) n_ctx, n_ctx, loss,
                loss / std::log(2.0) * (double) tokens.size() / (double) std::max<std::size_t>(1, n_bytes));
    return loss;
}

}  // namespace rest::train
