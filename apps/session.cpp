#include "session.h"

#include "cost-cache.h"

#include "rest/drafter.h"
#include "rest/history-store.h"

#include <cstdio>

session::session(const session_params & params) : params_(params) {
    rest::llama_log_quiet();
    model_ = rest::model::load(params.model_path, params.n_gpu_layers, params.rpc_servers);
    if (!params.index_paths.empty()) {
        const auto & tok = model_->vocab();
        datastore_ = rest::datastore::open(params.index_paths, tok.fingerprint(), tok.description());
    }
    history_ = std::make_unique<rest::history_store>(rest::history_store_params{});
    open_context(params);
    rest::budget_spec spec;
    spec.speculate = params.speculate;
    spec.n_fixed   = params.n_draft_fixed;
    spec.n_max     = params.n_draft_max >= 0 ? params.n_draft_max : params.draft.n_budget_max;
    spec.costs     = costs_;
    // The automatic budget starts where the last run with this model, datastore and setting ended.
    if (params.speculate && params.n_draft_fixed < 0 && params.warm_start) {
        warm_ = load_budget_state(cost_key_, params.index_paths);
        spec.warm = warm_ ? &*warm_ : nullptr;
    }
    n_draft_cap_ = rest::budget_cap(spec);
    policy_      = rest::make_budget_policy(spec);
    decoder_ = std::make_unique<rest::decoder>(*ctx_, policy_.get());
    if (params.warm_up) {
        const rest::warm_up_result w = decoder_->warm_up(costs_, n_draft_cap_);
        warm_rows_                   = w.rows;
        if (params.verbose) {
            std::fprintf(stderr, "rest: warm-up: up to %d rows in %.1f ms\n", w.rows, w.t_us / 1000);
        }
    }
}

session::~session() = default;

void session::open_context(const session_params & params) {
    if (!params.speculate) {
        rest::context_params cp = params.ctx;
        cp.trees                = false;  // plain decoding: llama.cpp's own layout
        rest::layout_uses_trees(params.layout);  // still a user error when malformed
        ctx_    = model_->new_context(cp);
        layout_ = "plain";
        return;
    }
    // Fixed budgets take the table too: its per-size thread counts.
    measured_context mc = open_measured_context(*model_, params.ctx, params.layout, params.verbose, params.recalibrate);
    ctx_      = std::move(mc.ctx);
    costs_    = std::move(mc.costs);
    cost_key_ = std::move(mc.key);
    layout_   = mc.trees ? "tree" : "chain";
}

void session::save_learned() const {
    if (params_.speculate && params_.n_draft_fixed < 0 && params_.warm_start && ran_) {
        save_budget_state(cost_key_, params_.index_paths, policy_->export_state());
    }
}

std::vector<rest::token_id> session::tokenize_prompt(const std::string & text) const {
    return model_->vocab().tokenize(text, true, true);
}

std::vector<rest::token_id> session::tokenize_prediction(const std::string & text) const {
    auto tokens = model_->vocab().tokenize(text, false, false);
    rest::check_prediction_size(tokens.size(), ctx_->n_ctx_slot());
    return tokens;
}

run_result session::run(std::span<const rest::token_id> prompt, const run_options & opt) {
    auto sampler = model_->new_sampler(opt.sampling);
    rest::drafter_params dp = params_.draft;
    dp.use_datastore        = opt.use_datastore && datastore_ != nullptr;
    dp.use_context          = opt.use_context;
    dp.use_history          = opt.use_history;
    std::unique_ptr<rest::drafter> drafter;
    if (opt.speculate) {
        drafter = std::make_unique<rest::drafter>(datastore_.get(), dp.use_history ? history_.get() : nullptr, dp);
    }
    rest::request r;
    r.slot             = 0;
    r.params.n_predict = opt.n_predict;
    r.params.n_draft_max = opt.speculate ? n_draft_cap_ : 0;
    r.sampler          = sampler.get();
    r.draft            = drafter.get();
    r.is_eog           = [this](rest::token_id t) { return model_->is_eog(t); };
    r.on_token         = opt.on_token;
    r.prediction       = opt.prediction;
    decoder_->run(r, prompt);
    ran_ = ran_ || opt.speculate;
    return {std::move(r.output), r.stopped, r.stats};
}
