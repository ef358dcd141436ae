#include "session.h"

#include "cost-cache.h"

#include "rest/drafter.h"
#include "rest/history-store.h"

session::session(const session_params & params) : params_(params) {
    rest::llama_log_quiet();
    model_ = rest::model::load(params.model_path, params.n_gpu_layers);
    if (!params.index_path.empty()) {
        const auto & tok = model_->vocab();
        datastore_ = rest::datastore::open(params.index_path, tok.fingerprint(), tok.description());
    }
    history_ = std::make_unique<rest::history_store>(rest::history_store_params{});
    open_context(params);
    if (!params.speculate || params.n_draft_fixed >= 0) {
        policy_ = std::make_unique<rest::fixed_budget>(params.speculate ? params.n_draft_fixed : 0, costs_);
    } else {
        rest::adaptive_budget_params bp;
        bp.n_max = params.n_draft_max >= 0 ? params.n_draft_max : params.draft.n_budget_max;
        policy_  = std::make_unique<rest::adaptive_budget>(costs_, bp);
    }
    decoder_ = std::make_unique<rest::decoder>(*ctx_, policy_.get());
}

session::~session() = default;

void session::open_context(const session_params & params) {
    rest::context_params cp = params.ctx;
    cp.trees                = rest::layout_uses_trees(params.layout, params.n_gpu_layers);
    if (!params.speculate) {
        cp.trees = false;  // plain decoding: llama.cpp's own layout
        ctx_     = model_->new_context(cp);
        layout_  = "plain";
        return;
    }
    // Why rest::layout_uses_trees picks chains on CPUs and trees on GPUs: on a CPU, t(N) grows steeply, so budgets
    // are small and a tree's best path holds most of its value; the chain layout avoids the tree layout's fixed
    // per-pass cost in llama.cpp (~0.1 ms, a third of a tiny model's step), and it keeps the KV cells in position
    // order, which (with flash attention on quantized models) makes verification reproduce plain decoding bit for
    // bit: trees leave holes where rejected nodes were, and later tokens fill them, which changes the order of
    // attention sums. On GPUs t(N) is flat up to ~64 rows, and wide trees pay.
    ctx_    = model_->new_context(cp);
    layout_ = cp.trees ? "tree" : "chain";
    // Fixed budgets too: they take its per-size thread counts.
    costs_ = load_or_calibrate_costs(*model_, *ctx_, cp, params.verbose, params.recalibrate);
}

std::vector<rest::token_id> session::tokenize_prompt(const std::string & text) const {
    return model_->vocab().tokenize(text, true, true);
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
    r.params.n_draft_max = !opt.speculate                ? 0
                           : params_.n_draft_fixed >= 0   ? params_.n_draft_fixed
                           : params_.n_draft_max >= 0     ? params_.n_draft_max
                                                          : dp.n_budget_max;
    r.sampler          = sampler.get();
    r.draft            = drafter.get();
    r.is_eog           = [this](rest::token_id t) { return model_->is_eog(t); };
    r.on_token         = opt.on_token;
    decoder_->run(r, prompt);
    return {std::move(r.output), r.stopped, r.stats};
}
