// Draft sources and the per-request drafter that merges them into one budgeted draft tree.
//
// Ownership: the datastore and the history store must outlive every drafter that uses them. A drafter is per
// request (it keeps match state between steps) and is not thread-safe; the history store is shared and is.
//
// Sources (each optional): the datastore (longest context suffix of n_match_min..n_match_max tokens found in the
// suffix arrays of all shards, counts summed), the context (the same suffix inside prompt + output so far) and
// the history store (earlier outputs; the drafter searches the snapshot taken at reset()), and per request a
// prediction (a text the output is expected to repeat with edits: set_prediction()). Each proposes its own
// best nodes by continuation counts (exact up to scan_max occurrences, estimated from a sample of scan_max above
// that); they are merged into one trie and the best n_budget nodes are returned
// best-first (src/draft/tree-expand.h and tree-merge.h give the exact order).
#pragma once

#include "rest/datastore.h"
#include "rest/draft-provider.h"
#include "rest/draft-tree.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace rest {

class history_store;

struct drafter_params {
    int  n_match_max   = 16;    // longest context suffix tried against the datastore (REST: 16)
    int  n_match_min   = 2;     // shortest suffix accepted as a match (REST: 2)
    int  depth_max     = 10;    // longest drafted continuation (REST: 10)
    int  n_budget_max  = 64;    // most nodes a draft() returns (REST: 64)
    bool use_datastore = true;
    bool use_context   = true;  // prompt + generated tokens so far (prompt-lookup, as a counted tree)
    bool use_history   = true;  // past outputs of earlier requests
    int  n_match_max_prediction = 32;  // longest output suffix aligned with a request's prediction (set_prediction)

    // Scores: a node's score is the product along its path of count(child) / (count(parent) + alpha), times its
    // source's weight; merged nodes take the largest. alpha > 0 discounts evidence from few occurrences (a single
    // occurrence would otherwise predict its continuation with probability 1). Defaults: fitted on stories260K
    // (bench-draft-acceptance; /work/notes/draft-results.md), where they make the expected accepted length
    // (the sum of scores) match the measured one within ~10% per source.
    double alpha_datastore  = 1.0;
    double alpha_context    = 0.5;  // the model's own output: fewer occurrences are as trustworthy
    double alpha_history    = 0.5;
    double weight_datastore = 1.0;  // in (0, 1]
    double weight_context   = 1.0;  // in (0, 1]
    double weight_history   = 1.0;  // in (0, 1]

    // Cost limits.
    std::uint64_t scan_max          = 64;       // continuations read per match: all up to this many, else this many
                                                // evenly spaced (counts estimated; 0 reads one)
    std::uint64_t cache_min         = 256;      // selections under matches with more occurrences are cached
    std::size_t   n_context_occ_max = 64;       // most recent context occurrences kept for the context trie

    // Chains (draft_chain()): grown token by token, each step re-querying every source with the context plus the
    // chain so far (false: the best path of a tree, the way before). A suffix-array source's estimate backs off
    // over suffix lengths while its matches occur fewer than backoff_confident times, over at most backoff_levels
    // lengths (src/draft/sa-backoff.h).
    bool          chain_grow         = true;
    std::uint64_t backoff_confident  = 8;
    int           backoff_levels     = 4;
    double        chain_w_context    = 0.9;  // a request's starting weight of the context's estimate (draft_chain())
};

struct draft_stats {
    int           match_len_datastore = 0;  // length of the longest matched suffix (0: none)
    int           match_len_context   = 0;
    int           match_len_history   = 0;
    std::uint64_t match_count_datastore = 0;  // occurrences of that suffix
    int           n_nodes_datastore = 0;      // nodes of the returned tree each source proposed
    int           n_nodes_context   = 0;
    int           n_nodes_history   = 0;
    int           n_nodes_prediction = 0;
    int           match_len_prediction = 0;   // the prediction's alignment (src/draft/prediction-source.h)
    double        t_draft_us = 0;             // time spent in draft() (incl. update of the match state)

    std::uint64_t match_count_context = 0;    // occurrences of the context match (after n_context_occ_max)
    std::uint64_t match_count_history = 0;
    std::uint64_t n_probes  = 0;              // continuations read while selecting (datastore + history)
    std::uint64_t n_extend  = 0;              // match updates done by narrowing the previous match
    std::uint64_t n_find    = 0;              // whole-pattern searches done by match updates
    double        t_match_us  = 0;            // part of t_draft_us spent updating matches
    double        t_select_us = 0;            // part of t_draft_us spent selecting and merging
};

class drafter final : public draft_provider {
  public:
    drafter(const datastore * ds, history_store * history, drafter_params params);
    ~drafter() override;
    drafter(drafter &&) noexcept;
    drafter & operator=(drafter &&) noexcept;

    // Starts a request: the context is the prompt.
    void reset(std::span<const token_id> prompt) override;
    // Appends emitted tokens to the context (incremental: match state is updated, not recomputed).
    void accept(std::span<const token_id> tokens) override;
    // Sizes the context's tables for n_tokens (the context matcher's; before reset()).
    void reserve(std::size_t n_tokens) override;
    // The request's predicted output: one more source, a chain from where the output is aligned with it.
    void set_prediction(std::span<const token_id> prediction) override;
    bool has_prediction() const override;
    // Builds the best-first tree of at most n_budget nodes (<= params.n_budget_max) continuing the context.
    draft_tree draft(int n_budget) override { return draft(n_budget, nullptr); }
    draft_tree draft(int n_budget, draft_stats * stats);
    // A chain grown greedily (params.chain_grow): the next token is the one with the largest estimate given the
    // context and the chain so far, re-matched in every source after each token. Two estimates are mixed: the
    // suffix-array sources' alone (P_sa: the datastore's and the history's, sa-backoff.h, times the source's weight,
    // the larger of the two), and the context's counts with P_sa as their prior,
    //     P_ctx(t) = w_context * (count(t) + alpha_context * P_sa(t)) / (occurrences + alpha_context)
    // (P_sa where the context has no match); P = w * P_ctx + (1 - w) * P_sa, where w starts at chain_w_context and
    // is learned per request by Bayes' rule from the token that follows each chain's start (which of the two
    // estimates predicted it; clamped to [0.02, 0.98] so it can turn again). The request's own text is the most
    // specific evidence on an unrelated datastore (HumanEval with the standard library), the datastore on one that
    // holds near-copies of what is written. Candidates: each source's most frequent continuation (every back-off
    // level's). A node's score is the product of the estimates along the chain. It stops before a node scored
    // below score_min (the first `want` are kept), where no source continues, or at min(cap, room, 2 * want) nodes. With
    // chain_grow off: the default (the best path of a tree).
    // With a prediction, the best path of a tree; where that path follows the prediction, it goes on along it to
    // min(cap, room, n_budget_max, k_chain_nodes_max) nodes (extend_along_prediction()).
    draft_tree draft_chain(std::int32_t cap, std::int32_t want, std::int32_t room, float score_min) override;
    // The stats of the last draft() call.
    const draft_stats & last_stats() const;
    // Ends the request: hands its output to the history store (if any).
    void finish() override;

    std::span<const token_id> context() const;

  private:
    // Appends to a chain that is a prefix of the prediction's draft the prediction's next tokens, up to n_max nodes.
    void extend_along_prediction(draft_tree & chain, std::int32_t n_max);
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace rest
