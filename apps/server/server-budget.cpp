#include "server-budget.h"

#include "../cost-cache.h"


server_budget make_server_budget(const server_params & p, const rest::model & m, const rest::context_params & cp,
                                 std::int32_t n_budget_max) {
    rest::budget_spec spec;
    spec.speculate = p.speculate;
    spec.n_fixed   = p.n_draft_fixed;
    spec.n_max     = p.n_draft_max >= 0 ? p.n_draft_max : n_budget_max;
    server_budget b;
    std::optional<rest::budget_state> warm;
    if (!p.speculate) {
        rest::context_params plain = cp;
        plain.trees                = false;
        rest::layout_uses_trees(p.layout);  // a malformed --draft-layout is still an error
        b.ctx = m.new_context(plain);
    } else {
        measured_context mc = open_measured_context(m, cp, p.layout, p.verbose, p.recalibrate);
        b.ctx      = std::move(mc.ctx);
        spec.costs = std::move(mc.costs);
        if (p.n_draft_fixed < 0) {
            b.key     = std::move(mc.key);
            warm      = load_budget_state(b.key, p.index_paths);
            spec.warm = warm ? &*warm : nullptr;
        }
    }
    b.costs  = spec.costs;
    b.policy = rest::make_budget_policy(spec);
    b.n_cap  = rest::budget_cap(spec);
    return b;
}
