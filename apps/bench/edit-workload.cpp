#include "edit-workload.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace bench {

std::vector<rest::token_id> random_edits(std::span<const rest::token_id> text, std::int32_t k_per_128,
                                         std::int32_t n_vocab, std::uint32_t seed) {
    std::vector<rest::token_id> v(text.begin(), text.end());
    const auto n_edits = (std::int64_t) std::llround((double) std::max(0, k_per_128) * (double) v.size() / 128.0);
    std::mt19937                       rng(seed);
    std::uniform_int_distribution<int> kind(0, 2), len(1, 5), tok(0, std::max(1, n_vocab) - 1);
    for (std::int64_t e = 0; e < n_edits; ++e) {
        const std::size_t k   = (std::size_t) len(rng);
        const std::size_t pos = std::uniform_int_distribution<std::size_t>(0, v.size())(rng);
        const auto        at  = v.begin() + (std::ptrdiff_t) pos;
        switch (kind(rng)) {
            case 0:
                for (std::size_t i = 0; i < k; ++i) v.insert(v.begin() + (std::ptrdiff_t) pos, (rest::token_id) tok(rng));
                break;
            case 1:
                v.erase(at, v.begin() + (std::ptrdiff_t) std::min(v.size(), pos + k));
                break;
            default:
                for (std::size_t i = pos; i < std::min(v.size(), pos + k); ++i) v[i] = (rest::token_id) tok(rng);
        }
    }
    return v;
}

}  // namespace bench
