#include "bench-methods.h"

#include "rest/budget.h"
#include "rest/decoder.h"
#include "rest/drafter.h"
#include "rest/history-store.h"

#include <cmath>
#include <sstream>
#include <thread>

namespace bench {

namespace {

method_spec parse_one(const std::string & item) {
    method_spec m;
    m.name = item;
    std::string base = item;
    if (const size_t at = item.find('@'); at != std::string::npos) {
        base = item.substr(0, at);
        const std::string n = item.substr(at + 1);
        try {
            size_t used = 0;
            m.n_fixed   = std::stoi(n, &used);
            if (used != n.size() || m.n_fixed < 0 || m.n_fixed > 256) throw std::invalid_argument(n);
        } catch (const std::exception &) {
            throw rest::user_error("method '" + item + "': expected @N with N a draft budget in 0..256 (1..256 for a "
                                   "llama.cpp drafter)");
        }
        if (!base.starts_with("rest") && !is_llama_drafter(base)) {
            throw rest::user_error("method '" + item + "': only rest methods and llama.cpp's drafters take @N");
        }
        if (is_llama_drafter(base) && m.n_fixed < 1) {
            throw rest::user_error("method '" + item + "': a llama.cpp drafter's @N caps its draft, N in 1..256");
        }
    }
    if (base == "plain") {
        m.type = method_spec::kind::plain;
    } else if (base == "llama-plain") {
        m.type = method_spec::kind::llama_plain;
    } else if (base.starts_with("rest+pred")) {
        m.type          = method_spec::kind::rest;
        m.use_datastore = m.use_context = m.use_history = true;
        const std::string kind = base.substr(std::string("rest+pred").size());
        if (kind.empty()) {
            m.pred_edits = 0;
        } else if (kind == "-unrelated") {
            m.pred_unrelated = true;
        } else {
            size_t used = 0;
            try {
                m.pred_edits = kind.starts_with("-e") ? std::stoi(kind.substr(2), &used) : -1;
            } catch (const std::exception &) {
                m.pred_edits = -1;
            }
            if (m.pred_edits < 0 || m.pred_edits > 128 || used + 2 != kind.size()) {
                throw rest::user_error("method '" + item + "': expected rest+pred, rest+pred-eK (K edits per 128 "
                                       "tokens, 0..128) or rest+pred-unrelated");
            }
        }
    } else if (base == "rest" || base == "rest-datastore" || base == "rest-context" || base == "rest-history") {
        m.type          = method_spec::kind::rest;
        m.use_datastore = base == "rest" || base == "rest-datastore";
        m.use_context   = base == "rest" || base == "rest-context";
        m.use_history   = base == "rest" || base == "rest-history";
    } else if (is_llama_drafter(base)) {
        m.type    = method_spec::kind::llama_drafter;
        m.drafter = base;
    } else {
        throw rest::user_error("unknown method '" + item +
                               "' (plain, llama-plain, rest, rest-datastore, rest-context, rest-history, rest@N, rest+pred, rest+pred-eK, "
                               "rest+pred-unrelated, "
                               "ngram-cache, ngram-cache-nostatic, ngram-simple, ngram-mod, ngram-map-k, ngram-map-k4v; a llama.cpp type "
                               "also as TYPE@N, N >= 1)");
    }
    return m;
}

method_run finish(rest::request & r) {
    return {std::move(r.output), std::move(r.stats), rest::stop_reason_name(r.stopped), {}};
}

// rest's decoder without drafting, on a plain context of its own: exactly `rest generate --no-spec`.
class plain_runner final : public method_runner {
  public:
    plain_runner(session & s, const method_config & cfg)
        : s_(s), ctx_(s.model().new_context(plain_context(cfg.ctx))), dec_(*ctx_, nullptr) {}
    method_run run(std::span<const rest::token_id> prompt, std::int32_t n_predict, const rest::sampler_params & sampling,
                   std::span<const rest::token_id> prediction) override {
        std::vector<float>                   gaps;
        std::vector<rest::token_id>          runner_up;
        std::unique_ptr<rest::token_sampler> sampler;
        if (sampling.greedy()) {
            sampler = std::make_unique<rest::gap_recording_sampler>(gaps, &runner_up);
        } else {
            sampler = s_.model().new_sampler(sampling);
        }
        rest::request r;
        r.params.n_predict   = n_predict;
        r.params.n_draft_max = 0;
        r.sampler            = sampler.get();
        r.is_eog             = [this](rest::token_id t) { return s_.model().is_eog(t); };
        dec_.run(r, prompt);
        method_run out = finish(r);
        out.top2_gaps  = std::move(gaps);
        out.runner_up  = std::move(runner_up);
        return out;
    }

    rest::plain_trace resume_greedy(std::span<const rest::token_id> prompt, std::int32_t n_predict,
                                    std::span<const rest::token_id> prefix) override {
        return rest::resume_plain_greedy(*ctx_, prompt, n_predict, prefix,
                                         [this](rest::token_id t) { return s_.model().is_eog(t); });
    }

  private:
    static rest::context_params plain_context(rest::context_params cp) {
        cp.trees = false;
        return cp;
    }

    session &                            s_;
    std::unique_ptr<rest::target_model>  ctx_;
    rest::decoder                        dec_;
};

class rest_runner final : public method_runner {
  public:
    rest_runner(const method_spec & m, session & s, const method_config & cfg) : s_(s), dp_(cfg.draft) {
        dp_.use_datastore = m.use_datastore && s.datastore() != nullptr;
        dp_.use_context   = m.use_context;
        dp_.use_history   = m.use_history;
        // Every method starts cold (no budget cache), so that runs of the bench compare like with like.
        rest::budget_spec spec;
        spec.n_fixed = m.n_fixed;
        spec.n_max   = cfg.n_draft_max >= 0 ? cfg.n_draft_max : dp_.n_budget_max;
        spec.costs   = s.costs();
        policy_      = rest::make_budget_policy(spec);
        policy_->observe_warm_up(s.warm_rows());
        n_draft_max_ = rest::budget_cap(spec);
        if (dp_.use_history) {
            history_ = std::make_unique<rest::history_store>(rest::history_store_params{});
        }
        dec_ = std::make_unique<rest::decoder>(s.context(), policy_.get());
    }
    method_run run(std::span<const rest::token_id> prompt, std::int32_t n_predict, const rest::sampler_params & sampling,
                   std::span<const rest::token_id> prediction) override {
        auto          sampler = s_.model().new_sampler(sampling);
        rest::drafter drafter(dp_.use_datastore ? s_.datastore() : nullptr, history_.get(), dp_);
        rest::request r;
        r.params.n_predict   = n_predict;
        r.params.n_draft_max = n_draft_max_;
        r.sampler            = sampler.get();
        r.draft              = &drafter;
        r.prediction         = prediction;
        r.is_eog             = [this](rest::token_id t) { return s_.model().is_eog(t); };
        dec_->run(r, prompt);
        return finish(r);
    }

  private:
    session &                            s_;
    rest::drafter_params                 dp_;
    std::int32_t                         n_draft_max_ = 0;
    std::unique_ptr<rest::budget_policy> policy_;
    std::unique_ptr<rest::history_store> history_;
    std::unique_ptr<rest::decoder>       dec_;
};

// llama.cpp's drafts, verified whole every step (no budget policy), as llama.cpp verifies them.
class llama_drafter_runner final : public method_runner {
  public:
    llama_drafter_runner(const method_spec & m, session & s, const method_config & cfg,
                         const ngram_static_cache * static_cache)
        : s_(s), n_draft_max_(m.n_fixed > 0 ? m.n_fixed : cfg.n_llama_draft_max), dec_(s.context(), nullptr) {
        ngram_params np = cfg.ngram;
        if (m.n_fixed > 0) {
            np.cache_draft_max = m.n_fixed;  // ngram-cache@N: llama-lookup's --spec-draft-n-max N
        }
        drafter_ = make_llama_drafter(m.drafter, np, static_cache);
    }
    method_run run(std::span<const rest::token_id> prompt, std::int32_t n_predict, const rest::sampler_params & sampling,
                   std::span<const rest::token_id> prediction) override {
        auto          sampler = s_.model().new_sampler(sampling);
        rest::request r;
        r.params.n_predict   = n_predict;
        r.params.n_draft_max = n_draft_max_;
        r.sampler            = sampler.get();
        r.draft              = drafter_.get();
        r.is_eog             = [this](rest::token_id t) { return s_.model().is_eog(t); };
        dec_.run(r, prompt);
        return finish(r);
    }

  private:
    session &                             s_;
    std::int32_t                          n_draft_max_;
    rest::decoder                         dec_;
    std::unique_ptr<rest::draft_provider> drafter_;
};

class llama_plain_runner final : public method_runner {
  public:
    llama_plain_runner(session & s, const method_config & cfg)
        : plain_(cfg.model_path, s.context().n_ctx_slot(), cfg.n_batch,
                 cfg.n_threads > 0 ? cfg.n_threads : (std::int32_t) std::thread::hardware_concurrency(),
                 cfg.n_gpu_layers, cfg.ctx) {}
    method_run run(std::span<const rest::token_id> prompt, std::int32_t n_predict, const rest::sampler_params & sampling,
                   std::span<const rest::token_id> prediction) override {
        plain_result pr = plain_.run(std::vector<rest::token_id>(prompt.begin(), prompt.end()), n_predict, sampling);
        method_run   out;
        out.stats.n_prompt     = (std::int64_t) prompt.size();
        out.stats.n_tokens     = (std::int64_t) pr.tokens.size();
        out.stats.n_forward    = pr.n_forward;
        out.stats.n_steps      = (std::int64_t) pr.tokens.size();
        out.stats.accept_hist  = {out.stats.n_steps};
        out.stats.budget_hist  = {out.stats.n_steps};
        out.stats.t_prefill_us = pr.t_prefill_us;
        out.stats.t_total_us   = pr.t_total_us;
        out.stats.t_verify_us  = pr.t_total_us - pr.t_prefill_us;
        out.stop               = (std::int32_t) pr.tokens.size() >= n_predict ? "length" : "eog";
        out.tokens             = std::move(pr.tokens);
        return out;
    }

  private:
    llama_plain plain_;
};

}  // namespace

std::vector<method_spec> parse_methods(const std::string & list) {
    std::vector<method_spec> out;
    std::stringstream        ss(list);
    std::string              item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        method_spec m = parse_one(item);
        for (const auto & o : out) {
            if (o.name == m.name) throw rest::user_error("method '" + m.name + "' is listed twice");
        }
        out.push_back(std::move(m));
    }
    if (out.empty()) {
        throw rest::user_error("--methods: no methods given");
    }
    return out;
}

std::unique_ptr<method_runner> make_runner(const method_spec & spec, session & s, const method_config & cfg,
                                           const ngram_static_cache * static_cache) {
    switch (spec.type) {
        case method_spec::kind::plain:         return std::make_unique<plain_runner>(s, cfg);
        case method_spec::kind::llama_plain:   return std::make_unique<llama_plain_runner>(s, cfg);
        case method_spec::kind::rest:          return std::make_unique<rest_runner>(spec, s, cfg);
        case method_spec::kind::llama_drafter: return std::make_unique<llama_drafter_runner>(spec, s, cfg, static_cache);
    }
    return nullptr;
}

}  // namespace bench
