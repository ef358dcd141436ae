// Draft sources and the per-request drafter that merges them into one budgeted draft tree.
//
// Ownership: the datastore and the history store must outlive every drafter that uses them. A drafter is per
// request (it keeps match state between steps) and is not thread-safe; the history store is shared and is.
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
};

struct draft_stats {
    int           match_len_datastore = 0;  // length of the longest matched suffix (0: none)
    int           match_len_context   = 0;
    int           match_len_history   = 0;
    std::uint64_t match_count_datastore = 0;  // occurrences of that suffix
    int           n_nodes_datastore = 0;      // nodes of the returned tree each source proposed
    int           n_nodes_context   = 0;
    int           n_nodes_history   = 0;
    double        t_draft_us = 0;             // time spent in draft() (incl. update of the match state)
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
    // Builds the best-first tree of at most n_budget nodes (<= params.n_budget_max) continuing the context.
    draft_tree draft(int n_budget) override { return draft(n_budget, nullptr); }
    draft_tree draft(int n_budget, draft_stats * stats);
    // The stats of the last draft() call.
    const draft_stats & last_stats() const;
    // Ends the request: hands its output to the history store (if any).
    void finish() override;

    std::span<const token_id> context() const;

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace rest
