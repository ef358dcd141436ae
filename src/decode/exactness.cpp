#include "rest/exactness.h"

#include "rest/decoder.h"
#include "rest/sampler.h"

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
    const plain_trace * ref = &plain;  // the run compared now: plain, then each resumption
    plain_trace         resumed;
    size_t              off = 0;  // spec[off + i] is compared with ref->tokens[i]
    while (true) {
        const std::span<const token_id> rest = spec.subspan(off);
        const size_t n  = std::min(rest.size(), ref->tokens.size());
        const size_t i  = (size_t) (std::mismatch(rest.begin(), rest.begin() + (std::ptrdiff_t) n, ref->tokens.begin()).first -
                                    rest.begin());
        const size_t at = off + i;  // index in spec
        if (i == n) {
            if (rest.size() != ref->tokens.size()) {
                v.ok  = false;
                if (v.first_divergence < 0) v.first_divergence = (std::int32_t) at;
                v.why = "the outputs agree up to token " + std::to_string(at) + ", then one stops: speculative " +
                        std::to_string(spec.size()) + " tokens, plain " + std::to_string(off + ref->tokens.size());
            }
            return v;
        }
        const float gap = i < ref->gaps.size() ? ref->gaps[i] : -1;
        if (v.first_divergence < 0) {
            v.first_divergence = (std::int32_t) at;
            v.gap_at_first     = gap;
        }
        if (i >= ref->gaps.size() || i >= ref->runner_up.size()) {
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
        if (rest[i] != ref->runner_up[i]) {
            v.ok  = false;
            v.why = "divergence at token " + std::to_string(at) + " (a near-tie, gap " + num(gap) + ") to token " +
                    std::to_string(rest[i]) + ", which is not plain's runner-up " + std::to_string(ref->runner_up[i]);
            return v;
        }
        ++v.near_ties;
        off = at + 1;
        resumed = resume(spec.subspan(0, off));
        ref     = &resumed;
    }
}

namespace {

// Emits the prefix, then greedy tokens with their runner-ups and gaps recorded.
class replay_sampler final : public token_sampler {
  public:
    replay_sampler(std::span<const token_id> prefix, plain_trace & out)
        : prefix_(prefix), greedy_(out.gaps, &out.runner_up) {}
    token_id sample(std::span<const float> logits) override {
        return next_ < prefix_.size() ? prefix_[next_++] : greedy_.sample(logits);
    }
    void accept(token_id) override {}
    bool is_greedy() const override { return true; }

  private:
    std::span<const token_id> prefix_;
    std::size_t               next_ = 0;
    gap_recording_sampler     greedy_;
};

}  // namespace

plain_trace resume_plain_greedy(target_model & ctx, std::span<const token_id> prompt, std::int32_t n_predict,
                                std::span<const token_id> prefix, const std::function<bool(token_id)> & is_eog) {
    plain_trace    out;
    replay_sampler s(prefix, out);
    decoder        dec(ctx, nullptr);
    request        r;
    r.params.n_predict   = n_predict;
    r.params.n_draft_max = 0;
    r.sampler            = &s;
    r.is_eog             = is_eog;
    dec.run(r, prompt);
    if (r.output.size() > prefix.size()) out.tokens.assign(r.output.begin() + (std::ptrdiff_t) prefix.size(), r.output.end());
    return out;
}

}  // namespace rest
