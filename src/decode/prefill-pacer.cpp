#include "rest/prefill-pacer.h"

#include <algorithm>
#include <cmath>

namespace rest {

void prefill_pacer::recent::add(double x) {
    v[(std::size_t) at] = x;
    at                  = (at + 1) % (std::int32_t) v.size();
    n                   = std::min(n + 1, (std::int32_t) v.size());
}

double prefill_pacer::recent::median() const {
    if (n == 0) return -1;
    std::array<double, 7> s = v;
    std::nth_element(s.begin(), s.begin() + n / 2, s.begin() + n);
    return s[(std::size_t) (n / 2)];
}

prefill_pacer::prefill_pacer(std::int32_t n_max, prefill_pacer_params p) : n_max_(std::max(1, n_max)), p_(p) {}

std::int32_t prefill_pacer::next() {
    if (p_.gap_ratio <= 1.0) return n_max_;  // pacing off: whole batches, whatever the others wait
    const double plain = plain_us();
    if (plain < 0 ? since_plain_ > 0 : since_plain_ >= p_.probe_every) {
        return 0;  // measure a step without prompt rows first
    }
    const std::int32_t grow = last_ > 0 ? std::min(n_max_, 2 * last_) : std::min(n_max_, std::max(1, p_.first_chunk));
    const double       row  = row_us();
    std::int32_t       n    = grow;
    if (plain >= 0 && row > 0) {
        n = std::clamp((std::int32_t) std::floor((p_.gap_ratio - 1.0) * plain / row), 1, grow);
    }
    last_ = n;
    return n;
}

void prefill_pacer::observe(double t_us, std::int32_t n_prompt) {
    if (n_prompt <= 0) {
        plain_.add(t_us);
        since_plain_ = 0;
        return;
    }
    ++since_plain_;
    const double plain = plain_us();
    if (plain >= 0) {
        // A row costs at least a little: a step as fast as a plain one must not make chunks unbounded.
        row_.add(std::max(t_us - plain, 0.01 * plain) / n_prompt);
    }
}

}  // namespace rest
