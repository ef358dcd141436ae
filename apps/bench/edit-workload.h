// The bench's "edit" workload for predicted outputs: the prediction a caller would send when asking the model to
// rewrite a text it has seen, made from plain decoding's own output with random edits.
#pragma once

#include "rest/types.h"

#include <cstdint>
#include <span>
#include <vector>

namespace bench {

// text with round(k_per_128 * |text| / 128) edits, each a substitution, insertion or deletion of 1-5 tokens at a
// random place (new tokens uniform in [0, n_vocab)); deterministic in seed. k_per_128 == 0 returns text.
std::vector<rest::token_id> random_edits(std::span<const rest::token_id> text, std::int32_t k_per_128,
                                         std::int32_t n_vocab, std::uint32_t seed);

}  // namespace bench
