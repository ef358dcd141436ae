// How many prompt tokens a step may add while other requests are generating (chunked prefill).
//
// A long prompt processed in one pass stops every other stream for its whole duration. Chunked, it shares the
// steps: each step then takes longer, by what its chunk costs. The pacer sizes chunks so that a step with a chunk
// takes about `gap_ratio` times a step without one, from what both cost lately (measured, not assumed: per-token
// prompt cost and step time differ by model, machine and load):
//   - steps without prompt rows give the plain step time (an EMA); while a prompt keeps every step busy, one step
//     in `probe_every` goes without, so that figure stays current;
//   - steps with k prompt rows give the cost of a row, (t - plain) / k (an EMA);
//   - the next chunk is (gap_ratio - 1) * plain / row cost, at most twice the largest so far (a slow start from
//     `first_chunk`, so a wrong guess costs one short stall), at least one token, at most the batch.
#pragma once

#include <cstdint>

namespace rest {

struct prefill_pacer_params {
    double       gap_ratio   = 2.0;  // a step with a chunk / a step without (issue 19 asks for p99 <= 3)
    std::int32_t first_chunk = 4;
    std::int32_t probe_every = 16;   // steps with chunks between two without (to re-measure the plain step)
};

class prefill_pacer {
  public:
    explicit prefill_pacer(std::int32_t n_max, prefill_pacer_params p = {});

    // Prompt tokens for the next step while other requests generate (0: a step without, to measure it).
    std::int32_t chunk() const;
    // A step took t_us with n_prompt prompt tokens in it (0: none).
    void observe(double t_us, std::int32_t n_prompt);

    double plain_us() const { return plain_us_; }
    double row_us() const { return row_us_; }

  private:
    std::int32_t         n_max_;
    prefill_pacer_params p_;
    double               plain_us_ = -1;  // < 0: not measured yet
    double               row_us_   = -1;
    std::int32_t         last_     = 0;   // the largest chunk so far (growth is capped at twice it)
    std::int32_t         since_plain_ = 0;  // steps with chunks since the last without
};

}  // namespace rest
