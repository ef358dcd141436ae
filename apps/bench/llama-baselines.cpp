// The one bench file that includes llama.h and llama.cpp's common headers (see llama-baselines.h).
#include "llama-baselines.h"

#include "common.h"
#include "llama.h"
#include "ngram-cache.h"
#include "speculative.h"

#include "rest/types.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

static_assert(sizeof(rest::token_id) == sizeof(llama_token));

namespace bench {

namespace {

double now_us() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::micro>(clock::now().time_since_epoch()).count();
}

// A chain draft as a rest draft tree: node i is the child of node i-1. Scores fall with depth only to keep the
// tree's best-first invariant; the bench verifies llama.cpp's drafts whole (no budget policy), as llama.cpp does.
rest::draft_tree chain_tree(const std::vector<llama_token> & chain, size_t first, int n_max) {
    rest::draft_tree t;
    const size_t     n = std::min(chain.size() - std::min(chain.size(), first), (size_t) std::max(0, n_max));
    for (size_t i = 0; i < n; ++i) {
        t.add(chain[first + i], (std::int32_t) i - 1, 1.0f / (float) (i + 1), 0);
    }
    return t;
}

// How many leading emitted tokens equal the draft: the draft tokens the verifier accepted.
std::uint16_t n_matching(std::span<const rest::token_id> emitted, const rest::draft_tree & draft) {
    size_t k = 0;
    while (k < emitted.size() && k < draft.size() && emitted[k] == draft.tokens[k]) {
        ++k;
    }
    return (std::uint16_t) k;
}

// llama-lookup's drafting: context n-grams (1..4) of this request, a dynamic cache and the static cache. As
// llama-lookup does with a dynamic cache file (-lcd) from run to run, each request's context cache is merged into the
// dynamic cache when the next request starts, so earlier requests' text helps as rest's past outputs do.
class ngram_cache_drafter final : public rest::draft_provider {
  public:
    // The static cache is shared by every ngram-cache method of a run (one per cap) and only read:
    // common_ngram_cache_draft takes non-const references but only looks n-grams up in it.
    ngram_cache_drafter(int n_draft, const common_ngram_cache * nc_static)
        : n_draft_(n_draft), static_(nc_static ? const_cast<common_ngram_cache *>(nc_static) : &no_static_) {}
    ngram_cache_drafter(const ngram_cache_drafter &)             = delete;  // static_ may point at no_static_
    ngram_cache_drafter & operator=(const ngram_cache_drafter &) = delete;
    void reset(std::span<const rest::token_id> prompt) override {
        common_ngram_cache_merge(dynamic_, context_);
        inp_.assign(prompt.begin(), prompt.end());
        context_.clear();
        common_ngram_cache_update(context_, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, inp_, (int) inp_.size(), false);
    }
    void accept(std::span<const rest::token_id> tokens) override {
        for (rest::token_id t : tokens) {
            inp_.push_back(t);
            common_ngram_cache_update(context_, LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX, inp_, 1, false);
        }
    }
    rest::draft_tree draft(int n_budget) override {
        draft_.assign(1, inp_.back());
        common_ngram_cache_draft(inp_, draft_, std::min(n_draft_, n_budget), LLAMA_NGRAM_MIN, LLAMA_NGRAM_MAX,
                                 context_, dynamic_, *static_);
        return chain_tree(draft_, 1, n_budget);
    }

  private:
    int                      n_draft_;
    std::vector<llama_token> inp_;
    std::vector<llama_token> draft_;
    common_ngram_cache       context_, dynamic_, no_static_;
    common_ngram_cache *     static_;
};

// llama.cpp's common_speculative (as llama-server drives it) for one sequence. One instance serves every request
// of a method, so state it keeps across requests (ngram-mod's hash table) carries over as it does in the server.
class common_spec_drafter final : public rest::draft_provider {
  public:
    explicit common_spec_drafter(common_params_speculative params) : params_(std::move(params)) {
        spec_.reset(common_speculative_init(params_, 1));
        if (!spec_) {
            throw rest::user_error("llama.cpp's common_speculative_init failed for this speculative type");
        }
    }
    void reset(std::span<const rest::token_id> prompt) override {
        // llama.cpp's convention: `prompt` holds the tokens already in the target's memory; id_last is the newest.
        hist_.assign(prompt.begin(), prompt.end() - 1);
        last_ = prompt.back();
        common_speculative_begin(spec_.get(), 0, hist_);
        drafted_ = false;
    }
    void accept(std::span<const rest::token_id> tokens) override {
        if (drafted_) {
            common_speculative_accept(spec_.get(), 0, n_matching(tokens, tree_));
            drafted_ = false;
        }
        for (rest::token_id t : tokens) {
            hist_.push_back(last_);
            last_ = t;
        }
    }
    rest::draft_tree draft(int n_budget) override {
        result_.clear();
        common_speculative_get_draft_params(spec_.get(), 0) = {
            /* .drafting = */ true,
            /* .n_max    = */ n_budget,
            /* .n_past   = */ (llama_pos) hist_.size(),
            /* .id_last  = */ last_,
            /* .prompt   = */ &hist_,
            /* .result   = */ &result_,
        };
        common_speculative_draft(spec_.get());
        tree_    = chain_tree(result_, 0, n_budget);
        drafted_ = !tree_.empty();
        return tree_;
    }

  private:
    common_params_speculative params_;
    common_speculative_ptr    spec_;
    std::vector<llama_token>  hist_;
    llama_token               last_ = 0;
    std::vector<llama_token>  result_;
    rest::draft_tree          tree_;
    bool                      drafted_ = false;
};

struct sampler_deleter {
    void operator()(llama_sampler * s) const { llama_sampler_free(s); }
};

}  // namespace

struct ngram_static_cache::impl {
    common_ngram_cache cache;
};

ngram_static_cache::ngram_static_cache(const rest::datastore & ds) : impl_(std::make_unique<impl>()) {
    std::vector<llama_token> doc;
    for (const rest::index_shard & sh : ds.shards()) {
        const std::uint64_t n = sh.n_tokens();
        for (std::uint64_t pos = 0; pos <= n; ++pos) {
            const rest::token_id t = sh.token_at(pos);
            if (t != rest::k_doc_end) {
                doc.push_back(t);
                continue;
            }
            if (!doc.empty()) {
                common_ngram_cache_update(impl_->cache, LLAMA_NGRAM_STATIC, LLAMA_NGRAM_STATIC, doc, (int) doc.size(),
                                          false);
                doc.clear();
            }
        }
    }
}

ngram_static_cache::~ngram_static_cache() = default;

std::size_t ngram_static_cache::size() const {
    return impl_->cache.size();
}

bool is_llama_drafter(const std::string & kind) {
    return kind == "ngram-cache" || kind == "ngram-cache-nostatic" || kind == "ngram-simple" || kind == "ngram-mod" ||
           kind == "ngram-map-k" || kind == "ngram-map-k4v";
}

std::unique_ptr<rest::draft_provider> make_llama_drafter(const std::string & kind, const ngram_params & p,
                                                         const ngram_static_cache * static_cache) {
    if (kind == "ngram-cache" || kind == "ngram-cache-nostatic") {
        const bool with_static = kind == "ngram-cache" && static_cache;
        return std::make_unique<ngram_cache_drafter>(p.cache_draft_max, with_static ? &static_cache->impl_->cache : nullptr);
    }
    if (!is_llama_drafter(kind)) {
        throw rest::user_error("unknown llama.cpp drafter '" + kind + "'");
    }
    common_params_speculative sp;
    sp.types                  = {common_speculative_type_from_name(kind)};
    sp.ngram_simple.size_n    = (std::uint16_t) p.simple_size_n;
    sp.ngram_simple.size_m    = (std::uint16_t) p.simple_size_m;
    sp.ngram_mod.n_match      = p.mod_n_match;
    sp.ngram_mod.n_min        = p.mod_n_min;
    sp.ngram_mod.n_max        = p.mod_n_max;
    return std::make_unique<common_spec_drafter>(sp);
}

struct llama_plain::impl {
    llama_model *   model = nullptr;
    llama_context * ctx   = nullptr;
    std::int32_t    n_batch = 512;
    ~impl() {
        if (ctx) llama_free(ctx);
        if (model) llama_model_free(model);
    }
};

llama_plain::llama_plain(const std::string & model_path, std::int32_t n_ctx, std::int32_t n_batch,
                         std::int32_t n_threads, std::int32_t n_gpu_layers, const rest::context_params & types)
    : impl_(std::make_unique<impl>()) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers       = n_gpu_layers;
    impl_->model          = llama_model_load_from_file(model_path.c_str(), mp);
    if (!impl_->model) {
        throw rest::user_error("llama-plain: cannot load model '" + model_path + "'");
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx                = (std::uint32_t) n_ctx;
    cp.n_batch              = (std::uint32_t) n_batch;
    cp.n_ubatch             = (std::uint32_t) n_batch;
    cp.n_threads            = n_threads;
    cp.n_threads_batch      = n_threads;
    cp.no_perf              = true;
    // The names were checked when rest's own context was made; ggml spells every type the same way.
    auto type_of = [](const std::string & name) {
        for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
            if (const char * n = ggml_type_name((ggml_type) t); n && name == n) return (ggml_type) t;
        }
        return GGML_TYPE_F16;
    };
    cp.type_k               = type_of(types.cache_type_k);
    cp.type_v               = type_of(types.cache_type_v);
    if (ggml_is_quantized(cp.type_v)) cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    // Diagnostics (to tell apart what costs rest's own context its speed): REST_BENCH_LLAMA_PLAIN_NSEQ=N gives this
    // context n_seq_max N, REST_BENCH_LLAMA_PLAIN_UNIFIED=1 a unified KV cache, REST_BENCH_LLAMA_PLAIN_NOUT=N
    // n_outputs_max N (rest's adapter sets all three).
    if (const char * e = std::getenv("REST_BENCH_LLAMA_PLAIN_NSEQ"); e && std::atoi(e) > 1) {
        cp.n_seq_max = (std::uint32_t) std::atoi(e);
        cp.n_outputs_max = std::max<std::uint32_t>(cp.n_outputs_max, cp.n_seq_max);
    }
    if (const char * e = std::getenv("REST_BENCH_LLAMA_PLAIN_UNIFIED"); e && std::atoi(e) > 0) {
        cp.kv_unified = true;
    }
    if (const char * e = std::getenv("REST_BENCH_LLAMA_PLAIN_NOUT"); e && std::atoi(e) > 0) {
        cp.n_outputs_max = (std::uint32_t) std::atoi(e);
    }
    impl_->n_batch          = n_batch;
    impl_->ctx              = llama_init_from_model(impl_->model, cp);
    if (!impl_->ctx) {
        throw rest::user_error("llama-plain: cannot create a llama.cpp context");
    }
}

llama_plain::~llama_plain() = default;

plain_result llama_plain::run(const std::vector<rest::token_id> & prompt, std::int32_t n_predict,
                              const rest::sampler_params & p) {
    llama_context *      ctx   = impl_->ctx;
    const llama_vocab *  vocab = llama_model_get_vocab(impl_->model);
    const std::int32_t   n_ctx = (std::int32_t) llama_n_ctx(ctx);
    plain_result         res;
    if (prompt.empty() || (std::int32_t) prompt.size() >= n_ctx) {
        throw rest::user_error("llama-plain: the prompt does not fit the context");
    }
    std::unique_ptr<llama_sampler, sampler_deleter> smpl;
    {
        llama_sampler_chain_params cp = llama_sampler_chain_default_params();
        cp.no_perf                    = true;
        smpl.reset(llama_sampler_chain_init(cp));
        if (p.greedy()) {
            llama_sampler_chain_add(smpl.get(), llama_sampler_init_greedy());
        } else {
            const std::int32_t n_vocab = llama_vocab_n_tokens(vocab);
            if (p.penalized()) {
                llama_sampler_chain_add(smpl.get(), llama_sampler_init_penalties(n_vocab, p.repeat_last_n,
                                                                                 p.repeat_penalty,
                                                                                 p.frequency_penalty,
                                                                                 p.presence_penalty));
            }
            if (p.top_k > 0) llama_sampler_chain_add(smpl.get(), llama_sampler_init_top_k(p.top_k));
            if (p.top_p < 1.0f) llama_sampler_chain_add(smpl.get(), llama_sampler_init_top_p(p.top_p, 1));
            if (p.min_p > 0.0f) llama_sampler_chain_add(smpl.get(), llama_sampler_init_min_p(p.min_p, 1));
            llama_sampler_chain_add(smpl.get(), llama_sampler_init_temp(p.temp));
            llama_sampler_chain_add(smpl.get(), llama_sampler_init_dist(p.seed));
        }
    }
    for (const llama_token t : prompt) llama_sampler_accept(smpl.get(), t);  // as llama.cpp's server and CLI do
    const double t0 = now_us();
    llama_memory_clear(llama_get_memory(ctx), true);
    std::vector<llama_token> buf(prompt.begin(), prompt.end());
    for (size_t off = 0; off + 1 < buf.size(); off += (size_t) impl_->n_batch) {
        const std::int32_t n = (std::int32_t) std::min(buf.size() - 1 - off, (size_t) impl_->n_batch);
        if (llama_decode(ctx, llama_batch_get_one(buf.data() + off, n)) != 0) {
            throw rest::user_error("llama-plain: llama_decode failed on the prompt");
        }
        ++res.n_forward;
    }
    res.t_prefill_us = now_us() - t0;
    llama_token  root  = buf.back();
    std::int32_t n_pos = (std::int32_t) buf.size() - 1;
    while ((n_predict < 0 || (std::int32_t) res.tokens.size() < n_predict) && n_pos < n_ctx) {
        if (llama_decode(ctx, llama_batch_get_one(&root, 1)) != 0) {
            break;
        }
        ++res.n_forward;
        ++n_pos;
        const llama_token t = llama_sampler_sample(smpl.get(), ctx, -1);  // samples and accepts
        res.tokens.push_back(t);
        root = t;
        if (llama_vocab_is_eog(vocab, t)) {
            break;
        }
    }
    res.t_total_us = now_us() - t0;
    return res;
}

}  // namespace bench
