#include "server-budget.h"

std::unique_ptr<rest::budget_policy> make_server_budget(std::int32_t n_draft_max) {
    return std::make_unique<rest::fixed_budget>(n_draft_max >= 0 ? n_draft_max : k_server_draft_default);
}
