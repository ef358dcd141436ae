// A step-by-step record of what a budget policy saw, for diagnosing the automatic budget on a machine one cannot sit
// at (a GPU lent for minutes): with REST_BUDGET_TRACE=FILE set, make_budget_policy() wraps every policy it builds so
// that each step it observes is appended to FILE as one tab-separated line:
//
//   policy  step  rows  requests  n_equal  seqs  threads  n_past  t_pass_us  t_draft_us  tokens  drafted  predicted
//
// policy names the policy, the process and its instance there ("auto#4242.1", "fixed 8#4242.2"); a pass the policy did not choose
// (prompt processing) is a line "policy other", a warm-up "policy warm-up ROWS". Per shape, the pass times say what
// bench-policy-replay's --true-costs, --jitter and --cold-us should be to replay that machine. Off (the default), the
// factory returns the policy itself: nothing is paid.
#pragma once

#include "rest/budget.h"

#include <memory>
#include <string>

namespace rest {

// `inner` wrapped in a recording policy when REST_BUDGET_TRACE names a file that opens for appending (a one-line
// warning on stderr where it does not), else `inner` itself.
std::unique_ptr<budget_policy> traced_if_asked(std::unique_ptr<budget_policy> inner, const std::string & name);

}  // namespace rest
