#include "train.h"

#include "rest/types.h"

#include "ggml-opt.h"
#include "gguf.h"
#include "llama.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

namespace rest::train {

namespace {

using clock_type = std::chrono::steady_clock;

struct lr_state {
    float lr    = 0.0f;
    float wd    = 0.0f;
    float beta2 = 0.999f;
};

ggml_opt_optimizer_params get_opt_pars(void * ud) {
    const auto * s = static_cast<const lr_state *>(ud);
    ggml_opt_optimizer_params p = ggml_opt_get_default_optimizer_params(nullptr);
    p.adamw.alpha = s->lr;
    p.adamw.wd    = s->wd;
    p.adamw.beta2 = s->beta2;
    return p;
}

// Linear warm-up, then cosine decay from lr to lr_min over the remaining steps, or over the remaining time when
// --max-minutes would stop training first (so a time-limited run still ends at lr_min).
float schedule(const train_params & p, std::int64_t step, double minutes) {
    if (step < p.warmup) {
        return p.lr * (float) (step + 1) / (float) p.warmup;
    }
    double t = std::min(1.0, (double) (step - p.warmup) / (double) std::max<std::int64_t>(1, p.steps - p.warmup));
    if (p.max_minutes > 0) {
        t = std::max(t, std::min(1.0, minutes / p.max_minutes));
    }
    return p.lr_min + 0.5f * (p.lr - p.lr_min) * (float) (1.0 + std::cos(M_PI * t));
}

// One datapoint per start offset: inputs tokens[s, s+n_ctx), labels shifted by one.
ggml_opt_dataset_t make_dataset(const std::vector<llama_token> & tokens, const std::vector<std::size_t> & starts,
                                int64_t n_ctx) {
    ggml_opt_dataset_t ds = ggml_opt_dataset_init(GGML_TYPE_I32, GGML_TYPE_I32, n_ctx, n_ctx, (int64_t) starts.size(), 1);
    auto * data   = (llama_token *) ggml_opt_dataset_data(ds)->data;
    auto * labels = (llama_token *) ggml_opt_dataset_labels(ds)->data;
    for (std::size_t i = 0; i < starts.size(); ++i) {
        std::memcpy(data + i * n_ctx, tokens.data() + starts[i], n_ctx * sizeof(llama_token));
        std::memcpy(labels + i * n_ctx, tokens.data() + starts[i] + 1, n_ctx * sizeof(llama_token));
    }
    return ds;
}

// Mean next-token loss (nats) over the given sequences, no parameter update.
double evaluate(llama_context * ctx, const std::vector<llama_token> & tokens, const std::vector<std::size_t> & starts,
                int64_t n_ctx) {
    ggml_opt_dataset_t ds = make_dataset(tokens, starts, n_ctx);
    ggml_opt_result_t  rt = ggml_opt_result_init();
    ggml_opt_result_t  re = ggml_opt_result_init();
    llama_opt_epoch(ctx, ds, rt, re, 0, nullptr, nullptr);
    double loss = 0.0, unc = 0.0;
    ggml_opt_result_loss(re, &loss, &unc);
    ggml_opt_result_free(rt);
    ggml_opt_result_free(re);
    ggml_opt_dataset_free(ds);
    return loss;
}

void save_atomic(const llama_model * model, const std::string & path) {
    const std::string tmp = path + ".tmp";
    llama_model_save_to_file(model, tmp.c_str());
    std::filesystem::rename(tmp, path);
}

}  // namespace

void edit_f32_tensors(const std::string & in, const std::string & out_path,
                      const std::function<void(const std::string &, ggml_tensor *)> & edit) {
    ggml_context * data_ctx = nullptr;
    gguf_init_params gp = {false, &data_ctx};
    gguf_context * g = gguf_init_from_file(in.c_str(), gp);
    if (!g) {
        throw user_error("cannot read GGUF '" + in + "'");
    }
    try {
        for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
            const char *  name = gguf_get_tensor_name(g, i);
            ggml_tensor * t    = ggml_get_tensor(data_ctx, name);
            if (t->type == GGML_TYPE_F32) {
                edit(name, t);
            }
        }
    } catch (...) {
        gguf_free(g);
        ggml_free(data_ctx);
        throw;
    }
    // Rebuilt rather than edited: a GGUF read from a file keeps its tensor data in data_ctx, not in its own infos.
    gguf_context * out = gguf_init_empty();
    gguf_set_kv(out, g);
    for (int64_t i = 0; i < gguf_get_n_tensors(g); ++i) {
        gguf_add_tensor(out, ggml_get_tensor(data_ctx, gguf_get_tensor_name(g, i)));
    }
    const std::string tmp = out_path + ".tmp";
    const bool ok = gguf_write_to_file(out, tmp.c_str(), false);
    gguf_free(out);
    gguf_free(g);
    ggml_free(data_ctx);
    if (!ok) {
        throw user_error("cannot write '" + tmp + "'");
    }
    std::filesystem::rename(tmp, out_path);
}

void rescale_tensor(const std::string & path, const std::string & name, float scale) {
    bool found = false;
    edit_f32_tensors(path, path, [&](const std::string & n, ggml_tensor * t) {
        if (n == name) {
            found = true;
            auto * v = static_cast<float *>(t->data);
            for (int64_t i = 0; i < ggml_nelements(t); ++i) {
                v[i] *= scale;
            }
        }
    });
    if (!found) {
        throw user_error("init: '" + path + "' has no f32 tensor " + name);
    }
}

std::vector<std::string> read_list(const std::string & path) {
    std::ifstream in(path);
    if (!in) {
        throw user_error("train: cannot read file list '" + path + "'");
    }
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
        if (!line.empty()) {
            out.push_back(line);
        }
    }
    return out;
}

// Each file becomes BOS + tokens + EOS, so the model learns where files start and end.
std::vector<std::int32_t> tokenize_files(const llama_vocab * vocab, const std::string & list, std::size_t & n_bytes) {
    std::vector<llama_token> all;
    std::vector<llama_token> buf;
    n_bytes = 0;
    for (const auto & path : read_list(list)) {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            throw user_error("train: cannot read '" + path + "'");
        }
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string text = ss.str();
        n_bytes += text.size();
        buf.resize(text.size() + 8);
        int32_t n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), buf.data(), (int32_t) buf.size(), true, false);
        if (n < 0) {
            throw user_error("train: tokenizing '" + path + "' failed");
        }
        all.insert(all.end(), buf.begin(), buf.begin() + n);
        all.push_back(llama_vocab_eos(vocab));
    }
    return all;
}

void quiet_logs() {
    llama_log_set([](ggml_log_level level, const char * text, void *) {
        if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) {
            std::fputs(text, stderr);
        }
    }, nullptr);
}

void train_model(const train_params & p) {
    if (p.n_ctx < 8 || p.steps < 1 || p.warmup < 1 || p.eval_every < 1) {
        throw user_error("train: --ctx >= 8, --steps >= 1, --warmup >= 1 and --eval-every >= 1 are required");
    }
    llama_model_params mp = llama_model_default_params();
    mp.load_mode       = LLAMA_LOAD_MODE_NONE;  // the optimizer writes the weights in place
    mp.use_extra_bufts = false;                 // no repacked weight layouts: the backward pass needs plain ones
    llama_model * model = llama_model_load_from_file(p.model.c_str(), mp);
    if (!model) {
        throw user_error("train: cannot load model '" + p.model + "'");
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);

    std::size_t train_bytes = 0, heldout_bytes = 0;
    const auto train_tokens = tokenize_files(vocab, p.train_files, train_bytes);
    std::vector<llama_token> heldout_tokens;
    if (!p.heldout_files.empty()) {
        heldout_tokens = tokenize_files(vocab, p.heldout_files, heldout_bytes);
    }
    std::fprintf(stderr, "train: %zu tokens (%.2f bytes/token) for training, %zu held out\n", train_tokens.size(),
                 (double) train_bytes / (double) train_tokens.size(), heldout_tokens.size());
    if (train_tokens.size() < (std::size_t) p.n_ctx + 2) {
        throw user_error("train: the training files hold fewer tokens than one sequence");
    }

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx           = p.n_ctx;
    cp.n_batch         = p.n_ctx;
    cp.n_ubatch        = p.n_ctx;
    cp.n_threads       = p.n_threads;
    cp.n_threads_batch = p.n_threads;
    cp.type_k          = GGML_TYPE_F32;  // no f16 OUT_PROD on CPU
    cp.type_v          = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        llama_model_free(model);
        throw user_error("train: cannot create a context of " + std::to_string(p.n_ctx) + " tokens");
    }

    lr_state lrs;
    lrs.wd    = p.wd;
    lrs.beta2 = p.beta2;
    llama_opt_params op{};
    op.n_ctx_train     = 0;
    op.param_filter    = llama_opt_param_filter_all;
    op.get_opt_pars    = get_opt_pars;
    op.get_opt_pars_ud = &lrs;
    op.optimizer_type  = GGML_OPT_OPTIMIZER_TYPE_ADAMW;
    llama_opt_init(ctx, model, op);

    // Held-out sequences: non-overlapping windows; periodic evaluations use an evenly spread subset.
    std::vector<std::size_t> heldout_all, heldout_some;
    for (std::size_t s = 0; s + p.n_ctx + 1 <= heldout_tokens.size(); s += p.n_ctx) {
        heldout_all.push_back(s);
    }
    const std::size_t stride = std::max<std::size_t>(1, heldout_all.size() / std::max(1, p.eval_seqs));
    for (std::size_t i = 0; i < heldout_all.size() && (int) heldout_some.size() < p.eval_seqs; i += stride) {
        heldout_some.push_back(heldout_all[i]);
    }

    FILE * log = std::fopen(p.log_path.c_str(), "w");
    if (!log) {
        throw user_error("train: cannot write log '" + p.log_path + "'");
    }
    std::fprintf(log, "step\ttokens\tseconds\tlr\ttrain_loss\theldout_loss\n");

    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<std::size_t> pick(0, train_tokens.size() - p.n_ctx - 1);
    ggml_opt_result_t rt = ggml_opt_result_init();
    ggml_opt_result_t re = ggml_opt_result_init();
    const auto t0 = clock_type::now();
    double ema = 0.0;
    std::int64_t step = 0;
    for (; step < p.steps; ++step) {
        lrs.lr = schedule(p, step, std::chrono::duration<double>(clock_type::now() - t0).count() / 60.0);
        ggml_opt_dataset_t ds = make_dataset(train_tokens, {pick(rng)}, p.n_ctx);
        llama_opt_epoch(ctx, ds, rt, re, 1, nullptr, nullptr);
        ggml_opt_dataset_free(ds);
        double loss = 0.0, unc = 0.0;
        ggml_opt_result_loss(rt, &loss, &unc);
        ggml_opt_result_reset(rt);
        ema = step == 0 ? loss : 0.98 * ema + 0.02 * loss;
        const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
        const bool   last = step + 1 == p.steps || (p.max_minutes > 0 && secs > 60.0 * p.max_minutes);
        const bool   eval = (step + 1) % p.eval_every == 0 || last;
        double heldout = NAN;
        if (eval && !heldout_some.empty()) {
            heldout = evaluate(ctx, heldout_tokens, last ? heldout_all : heldout_some, p.n_ctx);
        }
        std::fprintf(log, "%lld\t%lld\t%.1f\t%.3g\t%.4f\t%s\n", (long long) step + 1,
                     (long long) (step + 1) * p.n_ctx, secs, lrs.lr, loss,
                     std::isnan(heldout) ? "" : std::to_string(heldout).c_str());
        if ((step + 1) % 20 == 0 || eval) {
            std::fflush(log);
            const double tps = (double) (step + 1) * p.n_ctx / secs;
            std::fprintf(stderr, "step %lld/%lld  loss %.3f (ema %.3f)  lr %.2e  %.0f tok/s  %.1f min  eta %.1f min%s\n",
                         (long long) step + 1, (long long) p.steps, loss, ema, lrs.lr, tps, secs / 60.0,
                         (double) (p.steps - step - 1) * p.n_ctx / tps / 60.0,
                         std::isnan(heldout) ? "" : ("  held-out " + std::to_string(heldout)).c_str());
        }
        if (eval) {
            save_atomic(model, p.out);
        }
        if (last) {
            break;
        }
    }
    std::fclose(log);
    ggml_opt_result_free(rt);
    ggml_opt_result_free(re);
    llama_free(ctx);
    llama_model_free(model);
}

void check_tokenizer(const std::string & model_path, const std::string & files) {
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) {
        throw user_error("check: cannot load model '" + model_path + "'");
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::size_t n_files = 0, n_bad = 0, n_bytes = 0, n_tokens = 0;
    std::vector<llama_token> toks;
    std::string back;
    for (const auto & path : read_list(files)) {
        std::ifstream in(path, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string text = ss.str();
        toks.resize(text.size() + 8);
        const int32_t n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), toks.data(), (int32_t) toks.size(),
                                         false, false);
        back.resize(text.size() * 2 + 64);
        const int32_t m = n < 0 ? -1 : llama_detokenize(vocab, toks.data(), n, back.data(), (int32_t) back.size(),
                                                        false, false);
        ++n_files;
        n_bytes += text.size();
        n_tokens += std::max(0, n);
        if (m < 0 || std::string(back.data(), m) != text) {
            if (n_bad++ < 5) {
                std::size_t i = 0;
                while (m >= 0 && i < (std::size_t) m && i < text.size() && back[i] == text[i]) {
                    ++i;
                }
                std::fprintf(stderr, "check: %s does not round-trip (first difference at byte %zu)\n", path.c_str(), i);
            }
        }
    }
    llama_model_free(model);
    std::printf("check: %zu files, %zu bytes, %zu tokens (%.2f bytes/token), %zu do not round-trip\n", n_files, n_bytes,
                n_tokens, n_tokens ? (double) n_bytes / (double) n_tokens : 0.0, n_bad);
    if (n_bad) {
        throw user_error("check: the tokenizer does not round-trip every file");
    }
}

void quantize_model(const std::string & in, const std::string & out, const std::string & type, const std::string & name) {
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    if (type == "q8_0") {
        qp.ftype = LLAMA_FTYPE_MOSTLY_Q8_0;
    } else if (type == "f16") {
        qp.ftype = LLAMA_FTYPE_MOSTLY_F16;
    } else if (type == "f32") {
        qp.ftype = LLAMA_FTYPE_ALL_F32;
    } else {
        throw user_error("quantize: --type must be f32, f16 or q8_0 (got '" + type + "')");
    }
    std::vector<llama_model_kv_override> kv(2);
    std::memset(kv.data(), 0, kv.size() * sizeof(kv[0]));
    kv[0].tag = LLAMA_KV_OVERRIDE_TYPE_STR;
    std::snprintf(kv[0].key, sizeof(kv[0].key), "general.name");
    std::snprintf(kv[0].val_str, sizeof(kv[0].val_str), "%s", name.c_str());
    qp.kv_overrides = kv.data();
    const std::string tmp = out + ".tmp";
    if (llama_model_quantize(in.c_str(), tmp.c_str(), &qp) != 0) {
        std::remove(tmp.c_str());
        throw user_error("quantize: llama_model_quantize '" + in + "' -> " + type + " failed");
    }
    std::filesystem::rename(tmp, out);
}

}  // namespace rest::train
