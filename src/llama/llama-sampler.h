#pragma once

#include "llama-cpp.h"
#include "rest/sampler.h"

#include <vector>

namespace rest {

class llama_chain_sampler final : public token_sampler {
  public:
    // n_vocab sizes the penalty sampler's state.
    llama_chain_sampler(std::int32_t n_vocab, const sampler_params & params);
    token_id sample(std::span<const float> logits) override;
    void accept(token_id t) override;
    bool is_greedy() const override { return false; }

  private:
    llama_sampler_ptr             chain_;
    std::vector<llama_token_data> cur_;
};

}  // namespace rest
