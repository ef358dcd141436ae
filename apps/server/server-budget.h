// The one place that picks the server's draft budget policy, so switching to the cost model (issue 6) is a
// one-line change here.
#pragma once

#include "rest/budget.h"

#include <cstdint>
#include <memory>

// The draft-node cap each slot gets per step when neither the server (--draft-max) nor the request sets one.
inline constexpr std::int32_t k_server_draft_default = 8;

// n_draft_max < 0: the server's default budget; otherwise a fixed cap.
std::unique_ptr<rest::budget_policy> make_server_budget(std::int32_t n_draft_max);
