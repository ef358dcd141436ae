// What the decoder needs from a drafter. rest::drafter (drafter.h) is the real one; tests plug in their own to
// drive the verifier with arbitrary trees.
#pragma once

#include "rest/draft-tree.h"

#include <span>

namespace rest {

class draft_provider {
  public:
    virtual ~draft_provider() = default;
    // Starts a request: the context is the prompt.
    virtual void reset(std::span<const token_id> prompt) = 0;
    // Appends emitted tokens to the context.
    virtual void accept(std::span<const token_id> tokens) = 0;
    // Best-first tree of at most n_budget nodes continuing the context (every prefix is a valid tree).
    virtual draft_tree draft(int n_budget) = 0;
    // Ends the request.
    virtual void finish() {}
};

}  // namespace rest
