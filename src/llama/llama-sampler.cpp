// token_sampler over llama.cpp's sampler chain. Logits rows come from the verifier (one per tree node), so the
// chain is applied to a candidate array built from the row, exactly as llama_sampler_sample does internally.
#include "llama-sampler.h"

#include <numeric>

namespace rest {

llama_chain_sampler::llama_chain_sampler(std::int32_t n_vocab, const sampler_params & p) {
    llama_sampler_chain_params cp = llama_sampler_chain_default_params();
    cp.no_perf                    = true;
    chain_.reset(llama_sampler_chain_init(cp));
    // Same order as llama.cpp's common sampler defaults: penalties, top-k, top-p, min-p, temperature, dist.
    if (p.penalized()) {
        llama_sampler_chain_add(chain_.get(), llama_sampler_init_penalties(n_vocab, p.repeat_last_n, p.repeat_penalty,
                                                                           p.frequency_penalty, p.presence_penalty));
    }
    if (p.temp <= 0.0f) {  // greedy with penalties: the truncations below keep the argmax, so it is taken here
        llama_sampler_chain_add(chain_.get(), llama_sampler_init_greedy());
        return;
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
