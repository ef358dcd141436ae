#include "server-budget.h"

#include "../cost-cache.h"

#include "rest/cost-model.h"

server_budget make_server_budget(const server_params & p, const rest::model & m, rest::target_model & ctx,
                                 const rest::context_params & cp, std::int32_t n_budget_max) {
    server_budget b;
    if (!p.speculate) {
        b.policy = std::make_unique<rest::fixed_budget>(0);
        return b;
    }
    rest::cost_table costs = load_or_calibrate_costs(m, ctx, cp, p.verbose, p.recalibrate);
    if (p.n_draft_fixed >= 0) {
        b.policy = std::make_unique<rest::fixed_budget>(p.n_draft_fixed, std::move(costs));
        b.n_cap  = p.n_draft_fixed;
        return b;
    }
    rest::adaptive_budget_params bp;
    bp.n_max = p.n_draft_max >= 0 ? p.n_draft_max : n_budget_max;
    b.policy = std::make_unique<rest::adaptive_budget>(std::move(costs), bp);
    b.n_cap  = bp.n_max;
    return b;
}
