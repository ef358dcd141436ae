// What a sampler's parameters may be, checked in the core so that every front end refuses the same values.
#include "rest/sampler.h"
#include "rest/types.h"

#include <cmath>
#include <string>

namespace rest {

void check_sampler_params(const sampler_params & p) {
    // Values that llama.cpp's samplers take without complaint and turn into junk: a NaN temperature samples at
    // random, a repeat penalty of 0 divides the logits by 0.
    const auto bad = [](const char * what, float v, const char * want) {
        throw user_error(std::string(what) + " must be " + want + ", got " + std::to_string(v));
    };
    if (!std::isfinite(p.temp)) bad("the temperature", p.temp, "a finite number (<= 0: greedy)");
    if (!std::isfinite(p.top_p) || p.top_p <= 0.0f) bad("top-p", p.top_p, "positive (1 or more: off)");
    if (!std::isfinite(p.min_p) || p.min_p < 0.0f || p.min_p > 1.0f) bad("min-p", p.min_p, "in [0, 1] (0: off)");
    if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f) {
        bad("the repeat penalty", p.repeat_penalty, "a positive number (1: off)");
    }
    if (!std::isfinite(p.presence_penalty)) bad("the presence penalty", p.presence_penalty, "a finite number");
    if (!std::isfinite(p.frequency_penalty)) bad("the frequency penalty", p.frequency_penalty, "a finite number");
    if (p.repeat_last_n < 0) {  // llama.cpp's penalties clamp it to 0 (off); -1 is not "the context" there
        throw user_error("repeat-last-n must be 0 or more, got " + std::to_string(p.repeat_last_n));
    }
}

}  // namespace rest
