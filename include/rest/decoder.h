// The speculation loop: draft, verify in one forward pass, walk the tree, commit, emit.
//
// One decoder drives one target_model. Requests live in slots; step() advances every active request by one
// forward pass (continuous batching for the server; a single request for the CLI). Output is exactly what plain
// decoding with the same sampler would produce: at every visited node the sampler draws once from that node's
// logits and emits the draw; the walk continues only into a child drafted with the same token.
#pragma once

#include "rest/budget.h"
#include "rest/draft-provider.h"
#include "rest/logprobs.h"
#include "rest/sampler.h"
#include "rest/target-model.h"

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace rest {

enum class stop_reason {
    none,     // still running
    length,   // n_predict tokens emitted
    eog,      // end-of-generation token emitted (it is part of the output)
    context,  // the slot's context is full
    stop,     // a caller-defined stop condition (e.g. a stop string) matched
    cancelled,
};

const char * stop_reason_name(stop_reason r);

struct generation_stats {
    std::int64_t n_prompt = 0;      // prompt tokens
    std::int64_t n_cached = 0;      // of which the slot's memory held already (prompt cache): not processed again
    std::int64_t n_tokens = 0;      // emitted tokens
    std::int64_t n_forward = 0;     // target forward passes: prompt chunks + steps
    std::int64_t n_steps = 0;       // verification steps (forward passes after the prompt)
    std::int64_t n_drafted = 0;     // draft nodes verified
    std::int64_t n_accepted = 0;    // draft nodes accepted
    // Draft nodes from the request's prediction that were verified and accepted / rejected (OpenAI's
    // accepted_prediction_tokens / rejected_prediction_tokens). A node other sources proposed too counts here.
    std::int64_t n_prediction_accepted = 0;
    std::int64_t n_prediction_rejected = 0;
    // Accepted tokens decoded a second time in the next pass, to keep the slot's KV cells in position order
    // (tree layout, where the accepted path left the first rows: target_model::n_recomputed).
    std::int64_t n_recomputed = 0;
    std::vector<std::int64_t> accept_hist;  // [k] = steps that accepted k draft tokens
    std::vector<std::int64_t> budget_hist;  // [n] = steps that verified n draft nodes
    double t_prefill_us = 0;
    double t_draft_us = 0;
    double t_verify_us = 0;
    double t_sample_us = 0;
    double t_total_us = 0;

    double tokens_per_forward() const { return n_forward ? double(n_tokens) / double(n_forward) : 0.0; }
    void add(const generation_stats & o);
};

struct request_params {
    std::int32_t n_predict = 128;   // most tokens to emit (< 0: until EOG or context end)
    std::int32_t n_draft_max = 64;  // most draft nodes per step (0: plain decoding)
    bool         stop_at_eog = true;
};

// One generation. The caller owns it and keeps it (and the drafter and sampler it points to) alive while the
// decoder uses it.
struct request {
    std::int32_t        slot = 0;
    request_params      params;
    token_sampler *     sampler = nullptr;  // required
    draft_provider *    draft = nullptr;    // optional: null means plain decoding
    // A text the output is expected to repeat with edits (OpenAI's predicted outputs), tokenized; handed to the
    // drafter at start(). It changes only what is drafted, never the output.
    std::span<const token_id> prediction;
    std::function<bool(token_id)> is_eog;   // required when params.stop_at_eog
    // Called once per emitted token, in order; returning false stops the request (stop_reason::stop).
    std::function<bool(token_id)> on_token;

    // >= 0: record each emitted token's log probability and its n_logprobs most likely alternatives in logprobs,
    // from the logits it was sampled from (the same as plain decoding's, up to batched rounding).
    std::int32_t                n_logprobs = -1;
    std::vector<token_logprobs> logprobs;

    std::vector<token_id> output;
    stop_reason           stopped = stop_reason::none;
    generation_stats      stats;

    bool done() const { return stopped != stop_reason::none; }
    // Its prompt is still being processed (decoder::begin): it takes no step yet.
    bool prefilling() const { return n_prefilled < to_prefill.size(); }
    std::size_t n_prompt_left() const { return to_prefill.size() - n_prefilled; }

    // internal
    token_id root = 0;  // last emitted token, not yet in the KV memory
    std::vector<token_id> to_prefill;     // prompt tokens to put in memory before the first step (not the root)
    std::size_t           n_prefilled = 0;
    double                t_begin_us  = 0;
};

// A prediction can be at most as long as an output can (the context); throws user_error otherwise.
void check_prediction_size(std::size_t n_tokens, std::int32_t n_ctx_slot);

class decoder {
  public:
    // policy may be null (then each request verifies min(n_draft_max, tree size) nodes). Both must outlive this.
    decoder(target_model & model, budget_policy * policy);

    // Clears the request's slot, processes the prompt (all but its last token) and readies the first step.
    // Throws user_error when the prompt is empty or does not fit, or the prediction is longer than the context.
    void start(request & r, std::span<const token_id> prompt);
    // start() without processing the prompt: the slot keeps its first n_cached positions (a prompt cache: the
    // caller knows they hold prompt[0, n_cached)) and the rest is processed by prefill() or with step()s, after
    // which the request steps. Returns the positions kept (at most prompt.size() - 1; 0 for models that cannot).
    std::int32_t begin(request & r, std::span<const token_id> prompt, std::int32_t n_cached = 0);
    // Processes up to n of the request's remaining prompt tokens in passes of their own.
    void prefill(request & r, std::int32_t n);
    // One forward pass for all given requests that are not done or prefilling (their slots must differ). With
    // `prompt` (a request still prefilling, not among them), up to n_prompt of its prompt tokens join the pass
    // (target_model::queue_prefill), so a long prompt arrives in chunks while the others keep generating.
    void step(std::span<request * const> requests, request * prompt = nullptr, std::int32_t n_prompt = 0);
    // start + step until done.
    void run(request & r, std::span<const token_id> prompt);
    // Before the first request: warm_up() (rest/cost-model.h) on slot 0 up to the sizes of n_draft_max draft nodes,
    // and the policy told what ran. Leaves slot 0 empty. (With a llama.cpp context per slot, only slot 0's is warm;
    // the others' first passes are then priced as warm, which costs estimates, not output.)
    warm_up_result warm_up(const cost_table & costs, std::int32_t n_draft_max);

    target_model & model() const { return model_; }

  private:
    // The stages of step(), in order. Exactness rests on two rules kept in one place each: a pass without draft
    // nodes is a plain pass on the context's threads (verify), and a request without nodes is not padded
    // (build_batch), except where several requests' chains must be equal (choose_equal's k pads every request that
    // has a drafter, or llama.cpp would split the pass); and the walk emits exactly one draw per visited node.
    bool   collect_live(std::span<request * const> requests);  // live_ in slot order; false: nothing to do
    void   step_live();                                        // the stages below, over live_
    double draft_all();                                        // trees_; returns drafting time
    void   choose_budget();                                    // n_keep_, n_real_, trees_ truncated to n_real_
    void   build_batch();                                      // batch_: trees padded to n_keep_
    bool   verify();                                           // one forward pass; false: the context is full
    std::int64_t walk();                                       // sample, commit, emit; returns tokens emitted
    bool   emit(request & r, token_id t);
    void   prefilled(request & r, std::int64_t n_forward);  // books a prompt chunk; readies r after the last
    std::size_t pass_shape() const;  // step_report::n_equal of batch_

    target_model &  model_;
    budget_policy * policy_;
    // Per-step scratch, reused to keep the hot path free of allocations.
    std::vector<draft_tree>   trees_;
    std::vector<tree_request> batch_;
    std::vector<budget_query> queries_;
    std::vector<std::int32_t> n_keep_;
    std::vector<std::int32_t> n_real_;  // per request: verified drafted nodes (not counting padding)
    std::vector<request *>    live_;
    std::vector<std::int32_t> path_;
    std::vector<token_id>     emitted_;
    bool                      drafting_   = false;  // some request drafted this step
    bool                      predicted_  = false;  // some live request has a prediction
    std::int32_t              n_asked_    = 0;      // draft nodes asked for this step, over all requests
    bool                      equal_rows_ = false;  // this step's chains must all verify the same count
    std::int32_t              rows_       = 0;      // rows of this step's forward pass
    std::int32_t              plain_rows_ = 0;      // its rows without draft nodes (roots + pending rows)
    std::int32_t              seqs_       = 0;      // its sequences (step_report::n_seqs)
    bool                      mixed_      = false;  // another request's prompt rows share this step's pass
    std::int32_t              pass_threads_ = 0;    // threads of this step's pass (0: not known)
};

}  // namespace rest
