#include "rest/prefill-pacer.h"

#include <algorithm>
#include <cmath>

namespace rest {

namespace {

constexpr double k_alpha = 0.25;  // EMA weight of a new measurement

void ema(double & v, double x) { v = v < 0 ? x : v + k_alpha * (x - v); }

}  // namespace

prefill_pacer::prefill_pacer(std::int32_t n_max, prefill_pacer_params p) : n_max_(std::max(1, n_max)), p_(p) {}

std::int32_t prefill_pacer::chunk() const {
    if (plain_us_ < 0 ? since_plain_ > 0 : since_plain_ >= p_.probe_every) {
        return 0;  // measure a step without prompt rows first
    }
    const std::int32_t first = std::min(n_max_, std::max(1, p_.first_chunk));
    if (row_us_ <= 0 || plain_us_ < 0) {
        return last_ > 0 ? std::min(n_max_, 2 * last_) : first;
    }
    const double       fit  = (p_.gap_ratio - 1.0) * plain_us_ / row_us_;
    const std::int32_t grow = last_ > 0 ? 2 * last_ : first;
    return std::clamp((std::int32_t) std::floor(fit), 1, std::min(n_max_, grow));
}

void prefill_pacer::observe(double t_us, std::int32_t n_prompt) {
    if (n_prompt <= 0) {
        ema(plain_us_, t_us);
        since_plain_ = 0;
        return;
    }
    ++since_plain_;
    last_ = std::max(last_, n_prompt);  // (a prompt's last chunk is cut short by its end, not by the pacer)
    if (plain_us_ >= 0) {
        // A row costs at least a little: a step as fast as a plain one must not make chunks unbounded.
        ema(row_us_, std::max(t_us - plain_us_, 0.01 * plain_us_) / n_prompt);
    }
}

}  // namespace rest
