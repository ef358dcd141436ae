// What the decoder needs from a drafter. rest::drafter (drafter.h) is the real one; tests plug in their own to
// drive the verifier with arbitrary trees.
#pragma once

#include "rest/draft-tree.h"

#include <algorithm>
#include <cstdint>
#include <span>

namespace rest {

class draft_provider {
  public:
    virtual ~draft_provider() = default;
    // Before reset(): the next request's context will grow to about n_tokens; allocate for them now, not while
    // decoding.
    virtual void reserve(std::size_t n_tokens) { (void) n_tokens; }
    // Starts a request: the context is the prompt.
    virtual void reset(std::span<const token_id> prompt) = 0;
    // Appends emitted tokens to the context.
    virtual void accept(std::span<const token_id> tokens) = 0;
    // A text the output is expected to repeat, with edits (after reset(), which clears it; empty: none). Providers
    // without such a source ignore it.
    virtual void set_prediction(std::span<const token_id> prediction) { (void) prediction; }
    virtual bool has_prediction() const { return false; }
    // Best-first tree of at most n_budget nodes continuing the context (every prefix is a valid tree).
    virtual draft_tree draft(int n_budget) = 0;
    // A chain (node i the child of node i-1) of at most min(cap, room) nodes that a verifier taking one chain per
    // request checks; the policy will likely verify up to `want` of them, and no node after the first `want` whose
    // score (estimated path probability) is below score_min. Scores are non-increasing, so every prefix is a valid draft. Below: the default.
    virtual draft_tree draft_chain(std::int32_t cap, std::int32_t want, std::int32_t room, float score_min);
    // Ends the request.
    virtual void finish() {}
};

// What a request verifies on CPUs, where each draft is one chain. A provider that can grow chains directly
// overrides draft_chain(); the default is the best path of a bushier tree than `want` nodes would give, cut to cap
// nodes. The tree has chain_tree_nodes(want, room) nodes: 4x the nodes the budget policy may take (want), at most 32
// (paths as deep as drafts go, continuations being ~10 tokens, at a fraction of a 64-node tree's drafting time,
// which matters when a step is 0.2 ms) and at most the context room.
// The most nodes a chain verifies: a pass of 64 rows or more takes another kernel than a single-row decode (a tiled
// one with an f16 KV cache on a CPU), so longer chains would not be bit-exact on quantized models (README, Exactness).
constexpr std::int32_t k_chain_nodes_max = 32;
inline std::int32_t chain_tree_nodes(std::int32_t want, std::int32_t room) {
    return std::min({room, 4 * want, k_chain_nodes_max});
}

inline draft_tree draft_provider::draft_chain(std::int32_t cap, std::int32_t want, std::int32_t room, float score_min) {
    (void) score_min;
    draft_tree tree = draft(chain_tree_nodes(want, room));
    tree.keep_best_path();
    tree.truncate((std::size_t) std::max(0, cap));
    return tree;
}

// The chain a request verifies: cap, its own limit; want, the nodes the budget policy may take (its
// draft_nodes_hint()); room, the context left; score_min, the policy's chain_score_min().
inline draft_tree draft_chain(draft_provider & d, std::int32_t cap, std::int32_t want, std::int32_t room,
                              float score_min = 0) {
    return d.draft_chain(cap, want, room, score_min);
}

}  // namespace rest
