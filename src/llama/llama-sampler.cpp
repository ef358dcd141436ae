// token_sampler over llama.cpp's sampler chain. Logits rows come from the verifier (one per tree node), so the
// chain is applied to a candidate array built from the row, exactly as llama_sampler_sample does internally.
#include "llama-sampler.h"

#include "rest/types.h"

#include <cmath>
#include <numeric>
#include <string>

namespace rest {

void check_sampler_params(const sampler_params & p) {
    // Values that llama.cpp's samplers take without complaint and turn into junk: a NaN temperature samples at
    // random, a repeat penalty of 0 divides the logits by 0.
    const auto bad = [](const char * what, float v, const char * want) {
        throw user_error(std::string(what) + " must be " + want + ", got " + std::to_string(v));
    };
    if (!std::isfinite(p.temp)) bad("the temperature", p.temp, "a finite number (<= 0: greedy)");
    if (!std::isfinite(p.top_p) || p.top_p <= 0.0f) bad("top-p", p.top_p, "in (0, 1] (1: off)");
    if (!std::isfinite(p.min_p) || p.min_p < 0.0f || p.min_p > 1.0f) bad("min-p", p.min_p, "in [0, 1] (0: off)");
    if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f) {
        bad("the repeat penalty", p.repeat_penalty, "a positive number (1: off)");
    }
    if (!std::isfinite(p.presence_penalty)) bad("the presence penalty", p.presence_penalty, "a finite number");
    if (!std::isfinite(p.frequency_penalty)) bad("the frequency penalty", p.frequency_penalty, "a finite number");
    if (p.repeat_last_n < -1) {
        throw user_error("repeat-last-n must be -1 (the context) or more, got " + std::to_string(p.repeat_last_n));
    }
}

llama_chain_sampler::llama_chain_sampler(std::int32_t n_vocab, const sampler_params & p) {
    llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf                    = true;
    chain_.reset(llama_sampler_chain_init(cp));
    // Same order as llama.cpp's common sampler defaults: penalties, top-k, top-p, min-p, temperature, dist.
    if (p.repeat_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
        llama_sampler_chain_add(chain_.get(), llama_sampler_init_penalties(n_vocab, p.repeat_last_n, p.repeat_penalty,
                                                                           p.frequency_penalty, p.presence_penalty));
    }
    if (p.top_k > 0) {
        llama_sampler_chain_add(chain_.get(), llama_sampler_init_top_k(p.top_k));
    }
    if (p.top_p < 1.0f) {
        llama_sampler_chain_add(chain_.get(), llama_sampler_init_top_p(p.top_p, 1));
    }
    if (p.min_p > 0.0f) {
        llama_sampler_chain_add(chain_.get(), llama_sampler_init_min_p(p.min_p, 1));
    }
    llama_sampler_chain_add(chain_.get(), llama_sampler_init_temp(p.temp));
    llama_sampler_chain_add(chain_.get(), llama_sampler_init_dist(p.seed));
}

token_id llama_chain_sampler::sample(std::span<const float> logits) {
    cur_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        cur_[i] = {(llama_token) i, logits[i], 0.0f};
    }
    llama_token_data_array arr = {cur_.data(), cur_.size(), -1, false};
    llama_sampler_apply(chain_.get(), &arr);
    return arr.data[arr.selected].id;
}

void llama_chain_sampler::accept(token_id t) {
    llama_sampler_accept(chain_.get(), t);
}

}  // namespace rest
