// How many draft nodes to verify this step. The decoder asks a policy after drafting, with every request's
// scored tree in hand, so one choice covers the whole forward pass (continuous batching).
#pragma once

#include "rest/draft-tree.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace rest {

struct budget_query {
    const draft_tree * tree = nullptr;  // best-first candidates; the policy picks a prefix length
    std::int32_t       n_past = 0;      // committed tokens of this request (attention cost grows with it)
    std::int32_t       n_max = 0;       // hard cap from the caller (context room, --draft-max, sequence ids)
    // A query may be given more nodes than its tree has (up to n_max): the decoder pads the chain with filler
    // tokens, which a policy asks for when the extra rows keep the batch shape or cost nothing. Policies leave an
    // empty tree at 0 (a plain step, computed exactly as plain decoding computes it).
};

class budget_policy {
  public:
    virtual ~budget_policy() = default;
    // Whether drafting is worth its own time this step (a policy can back off when drafts keep not paying).
    virtual bool want_draft() { return true; }
    // Most nodes the policy is likely to verify per request this step, so that drafting can size its work to it
    // (a chain's best path from a 32-node tree costs 2-3x drafting an 8-node one; on a tiny model that is several
    // percent of a step). Any value >= 1; a policy may still choose more nodes than it said.
    virtual std::int32_t draft_nodes_hint() const { return 64; }
    // For each query, n_out[i] in [0, n_max]: verify the first n_out[i] nodes of the tree (0: plain decoding), the
    // ones past its size being padding.
    virtual void choose(std::span<const budget_query> queries, std::span<std::int32_t> n_out) = 0;
    // The same choice when every request must verify the same number k of nodes: chains of several requests in
    // separate sequences, which llama.cpp splits into one forward pass per distinct per-sequence token count (its
    // split_equal), so the decoder pads shorter chains up to k. Returns k. The default: the largest of choose()'s.
    virtual std::int32_t choose_equal(std::span<const budget_query> queries);
    // A forward pass the policy did not choose (prompt processing): the next step's shape counts as a change.
    virtual void observe_other_pass() {}
    // CPU threads for a forward pass of n_rows rows over n_requests requests (0: the context's own).
    virtual std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const {
        (void) n_rows;
        (void) n_requests;
        return 0;
    }
    // Feedback after a forward pass of n_rows rows (roots + nodes) at the given context fill, which took t_us;
    // t_draft_us is what drafting cost this step, over all requests. n_equal: the number of requests when the pass
    // was choose_equal()'s (equal chains in separate sequences) and ran as one pass; 1 for other single passes; 0
    // when llama.cpp ran it as several (unequal chains, or slots not consecutive), whose time prices no one shape.
    virtual void observe_step(std::int32_t n_rows, std::size_t n_equal, std::int32_t n_past, double t_us,
                              double t_draft_us) {
        (void) n_rows; (void) n_equal; (void) n_past; (void) t_us; (void) t_draft_us;
    }
    // Feedback per request: the first n_verified nodes of tree were verified and `path` (root's child first) was
    // accepted.
    virtual void observe_acceptance(const draft_tree & tree, std::int32_t n_verified, std::span<const std::int32_t> path) {
        (void) tree; (void) n_verified; (void) path;
    }
};

}  // namespace rest
