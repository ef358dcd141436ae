#include "rest/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace rest {

token_logprobs logprobs_of(std::span<const float> logits, token_id token, std::int32_t n_top) {
    token_logprobs out;
    out.token = token;
    if (logits.empty()) return out;
    // log-sum-exp around the maximum, in double: vocabularies of 150k terms lose digits in float.
    const float max = *std::max_element(logits.begin(), logits.end());
    double      sum = 0;
    for (const float v : logits) sum += std::exp((double) v - max);
    const double lse = max + std::log(sum);
    out.logprob      = (float) ((double) logits[(std::size_t) token] - lse);
    const std::size_t k = std::min<std::size_t>((std::size_t) std::max(0, n_top), logits.size());
    if (k > 0) {
        std::vector<token_id> ids(logits.size());
        std::iota(ids.begin(), ids.end(), 0);
        auto better = [&](token_id a, token_id b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
        std::partial_sort(ids.begin(), ids.begin() + (std::ptrdiff_t) k, ids.end(), better);
        for (std::size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], (float) ((double) logits[ids[i]] - lse));
    }
    return out;
}

}  // namespace rest
