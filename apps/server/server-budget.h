// The one place that picks the server's draft budget policy: the measured cost model (rest/cost-model.h, the
// table cached on disk by ../cost-cache.h) by default, or a fixed budget for comparisons.
#pragma once

#include "server-params.h"

#include "rest/budget.h"
#include "rest/llama-model.h"

#include <cstdint>
#include <memory>
#include <string>

struct server_budget {
    std::unique_ptr<rest::target_model>  ctx;     // in the layout --draft-layout asks for (or the measured one)
    std::unique_ptr<rest::budget_policy> policy;
    std::int32_t n_cap = 0;  // draft nodes per slot and step the decoder may offer the policy
    std::string  key;        // the budget cache's key when the policy learns (save_budget_state), else ""
    rest::cost_table costs;  // the measured (or cached) verify cost; empty for plain decoding
};

// Opens the context, measures (or loads the cached) verify cost, and builds the policy, warm from the budget cache.
server_budget make_server_budget(const server_params & p, const rest::model & m, const rest::context_params & cp,
                                 std::int32_t n_budget_max);
