// How many draft nodes to verify this step. The decoder asks a policy after drafting, with the scored tree in hand.
#pragma once

#include "rest/draft-tree.h"

#include <cstdint>

namespace rest {

struct budget_query {
    const draft_tree * tree = nullptr;  // best-first candidates; the policy picks a prefix length
    std::int32_t       n_past = 0;      // committed tokens of this request (attention cost grows with it)
    std::int32_t       n_batch_other = 0;  // rows other requests put in the same forward pass
    std::int32_t       n_max = 0;       // hard cap from the caller (context room, --draft-max)
};

class budget_policy {
  public:
    virtual ~budget_policy() = default;
    // Returns N in [0, min(n_max, tree size)]: verify the first N nodes (0: plain decoding this step).
    virtual std::int32_t choose(const budget_query & q) = 0;
    // Feedback after the step: rows decoded in the forward pass, the time it took, and, per node verified in this
    // request's tree, whether it was accepted. Default: ignore.
    virtual void observe(std::int32_t n_rows, double t_us, std::int32_t n_past) { (void) n_rows; (void) t_us; (void) n_past; }
    virtual void observe_acceptance(const draft_tree & tree, std::int32_t n_verified, std::int32_t n_accepted) {
        (void) tree; (void) n_verified; (void) n_accepted;
    }
};

// Always verifies min(n, n_max) nodes: the fixed budgets REST and most peers use.
class fixed_budget final : public budget_policy {
  public:
    explicit fixed_budget(std::int32_t n) : n_(n) {}
    std::int32_t choose(const budget_query & q) override;

  private:
    std::int32_t n_;
};

}  // namespace rest
