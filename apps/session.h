// What `rest generate`, `rest bench` and the server share: a loaded model, an optional datastore and history
// store, one context, and a decoder. Keeps the front ends thin.
#pragma once

#include "rest/datastore.h"
#include "rest/decoder.h"
#include "rest/drafter.h"
#include "rest/history-store.h"
#include "rest/llama-model.h"
#include "rest/budget.h"
#include "rest/sampler.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

struct session_params {
    std::string          model_path;
    std::vector<std::string> index_paths;     // none: no datastore; several: used as one
    rest::context_params ctx;
    std::int32_t         n_gpu_layers = 0;
    std::string          rpc_servers;          // llama.cpp's --rpc: "HOST:PORT,..." ("": none)
    rest::drafter_params draft;
    std::int32_t         n_draft_max = -1;     // cap on draft nodes per step; -1: the drafter's n_budget_max
    std::int32_t         n_draft_fixed = -1;   // >= 0: verify exactly this many nodes (no budget choice), for comparisons
    bool                 verbose = false;      // print the cost table to stderr
    bool                 recalibrate = false;  // measure the cost table even when one is cached
    bool                 speculate = true;     // false: plain decoding only (no cost calibration at start-up)
    // How drafts are verified: "tree" (a unified KV pool, branches), "chain" (each tree's best path, in the slot's
    // own sequence, as cheap per step as plain decoding) or "auto" (chains on CPUs, trees on GPUs; see session.cpp).
    std::string          layout = "auto";
    // Start the automatic budget from what the last run with this model, datastore and setting learned (the
    // budget cache, apps/cost-cache.h); save_learned() writes it back.
    bool                 warm_start = true;
    bool                 warm_up = true;  // forward passes before the first request (rest::decoder::warm_up)
};

struct run_options {
    std::int32_t          n_predict = 128;
    bool                  speculate = true;
    rest::sampler_params  sampling;
    bool                  use_datastore = true;
    bool                  use_context = true;
    bool                  use_history = true;
    std::function<bool(rest::token_id)> on_token;
    std::vector<rest::token_id> prediction;  // the predicted output, tokenized (tokenize_prediction)
};

struct run_result {
    std::vector<rest::token_id> tokens;
    rest::stop_reason           stopped = rest::stop_reason::none;
    rest::generation_stats      stats;
};

class session {
  public:
    explicit session(const session_params & params);  // throws user_error
    ~session();

    const rest::model & model() const { return *model_; }
    const rest::datastore * datastore() const { return datastore_.get(); }
    rest::history_store & history() { return *history_; }
    // The measured verify-cost table (empty without speculation).
    const rest::cost_table & costs() const { return costs_; }
    // The largest size the warm-up ran (session_params::warm_up; 0: none), for policies made later on this context.
    std::int32_t warm_rows() const { return warm_rows_; }
    rest::target_model & context() { return *ctx_; }
    rest::budget_policy & policy() { return *policy_; }
    // The verification layout in use: "tree", "chain", or "plain" without speculation.
    const std::string & layout() const { return layout_; }

    std::vector<rest::token_id> tokenize_prompt(const std::string & text) const;
    // A predicted output as the model would write it (no BOS, special tokens as text). Throws user_error when it
    // holds more tokens than the context (a prediction can only be as long as an output).
    std::vector<rest::token_id> tokenize_prediction(const std::string & text) const;
    run_result run(std::span<const rest::token_id> prompt, const run_options & opt);
    // Saves what the automatic budget learned, for the next run (nothing for fixed budgets or plain decoding).
    void save_learned() const;
    // The cost cache's key for this session's context (apps/cost-cache.h).
    const std::string & cost_key() const { return cost_key_; }

  private:
    void open_context(const session_params & params);  // sets ctx_, costs_, layout_

    session_params                    params_;
    std::unique_ptr<rest::model>      model_;
    std::unique_ptr<rest::datastore>  datastore_;
    std::unique_ptr<rest::history_store> history_;
    std::unique_ptr<rest::target_model>  ctx_;
    std::unique_ptr<rest::budget_policy> policy_;
    rest::cost_table                     costs_;
    std::string                          cost_key_;
    std::optional<rest::budget_state>    warm_;
    std::int32_t                         n_draft_cap_ = 0;
    std::int32_t                         warm_rows_ = 0;
    bool                                 ran_ = false;  // a speculative run happened (something was learned)
    std::string                          layout_;
    std::unique_ptr<rest::decoder>       decoder_;
};
