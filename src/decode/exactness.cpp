#include "rest/exactness.h"

#include <algorithm>
#include <cstdio>

namespace rest {

namespace {

std::string num(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

}  // namespace

exactness_verdict compare_to_plain(const plain_trace & plain, std::span<const token_id> spec, float eps,
                                   const plain_resume & resume) {
    exactness_verdict v;
    plain_trace       ref = plain;
    size_t            off = 0;  // spec[off + i] is compared with ref.tokens[i]
    while (true) {
        const std::span<const token_id> rest = spec.subspan(off);
        const size_t n = std::min(rest.size(), ref.tokens.size());
        size_t       i = 0;
        while (i < n && rest[i] == ref.tokens[i]) ++i;
        const size_t at = off + i;  // index in spec
        if (i == n) {
            if (rest.size() != ref.tokens.size()) {
                v.ok  = false;
                v.why = "the outputs agree up to token " + std::to_string(at) + ", then one stops: speculative " +
                        std::to_string(spec.size()) + " tokens, plain " + std::to_string(off + ref.tokens.size());
            }
            return v;
        }
        const float gap = i < ref.gaps.size() ? ref.gaps[i] : -1;
        if (v.first_divergence < 0) {
            v.first_divergence = (std::int32_t) at;
            v.gap_at_first     = gap;
        }
        if (i >= ref.gaps.size() || i >= ref.runner_up.size()) {
            v.ok  = false;
            v.why = "divergence at token " + std::to_string(at) + " where the plain run recorded no top-2 gap";
            return v;
        }
        if (!(gap < eps)) {
            v.ok  = false;
            v.why = "divergence at token " + std::to_string(at) + " where plain's top-2 gap is " + num(gap) +
                    " (not a near-tie)";
            return v;
        }
        if (rest[i] != ref.runner_up[i]) {
            v.ok  = false;
            v.why = "divergence at token " + std::to_string(at) + " (a near-tie, gap " + num(gap) + ") to token " +
                    std::to_string(rest[i]) + ", which is not plain's runner-up " + std::to_string(ref.runner_up[i]);
            return v;
        }
        ++v.near_ties;
        off = at + 1;
        ref = resume(spec.subspan(0, off));
    }
}

}  // namespace rest
