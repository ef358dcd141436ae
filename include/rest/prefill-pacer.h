// How many prompt tokens a step may add while other requests are generating (chunked prefill).
//
// A long prompt processed in one pass stops every other stream for its whole duration. Chunked, it shares the
// steps: each step then takes longer, by what its chunk costs. The pacer sizes chunks so that a step with a chunk
// takes about `gap_ratio` times a step without one, from what both cost lately (measured, not assumed: per-token
// prompt cost and step time differ by model, machine, layout and load):
//   - steps without prompt rows give the plain step time (the median of the last few); while a prompt keeps every
//     step busy, one step in `probe_every` goes without, so that figure stays current;
//   - a step with k prompt rows shows what the chunk added, t - plain = fixed + k * row: `fixed` is the cost of a
//     pass of its own where the layout needs one (the chain layout: about a plain step), `row` what each prompt
//     token costs. Both come from a least-squares line through the last few (k, added) points, once they hold two
//     chunk sizes (a point above 3x the median is clipped); with one size only, the last fixed cost stands, the row
//     cost follows, and the next step tries one token more, so that two sizes come into sight;
//   - the next chunk is ((gap_ratio - 1) * plain - fixed) / row, at most twice the last one (a slow start from
//     `first_chunk`), at least one token (where even one token costs more than the target, chunks are one token:
//     the prompt still progresses), at most the batch.
#pragma once

#include <array>
#include <cstdint>

namespace rest {

struct prefill_pacer_params {
    // A step with a chunk / a step without. Issue 19 asks for a p99 gap <= 3x; noise and a chunk pass's own fixed
    // cost (chain layout) need the margin. <= 1: no pacing (each step takes a whole batch of the prompt, as
    // llama-server does: the fastest prefill, and the others wait for it).
    double       gap_ratio   = 2.5;
    std::int32_t first_chunk = 4;
    std::int32_t probe_every = 16;  // steps with chunks between two without (to re-measure the plain step)
};

class prefill_pacer {
  public:
    explicit prefill_pacer(std::int32_t n_max, prefill_pacer_params p = {});

    // Prompt tokens for the next step while other requests generate (0: a step without, to measure it).
    std::int32_t next();
    // A step took t_us with n_prompt prompt tokens in it (0: none).
    void observe(double t_us, std::int32_t n_prompt);

    double plain_us() const { return plain_.median(); }  // < 0: not measured yet
    double row_us() const { return row_us_; }             // < 0: not measured yet
    double fixed_us() const { return fixed_us_; }

  private:
    // The median of the last few values: one slow step (a page fault, another process) moves nothing.
    struct recent {
        std::array<double, 7> v{};
        std::int32_t          n = 0, at = 0;
        void   add(double x);
        double median() const;
    };
    void fit();  // row_us_, fixed_us_ from points_

    std::int32_t         n_max_;
    prefill_pacer_params p_;
    recent               plain_;
    struct point {
        double n = 0, added = 0;
    };
    std::array<point, 8> points_{};  // the last steps with chunks: (prompt rows, time added)
    std::int32_t         n_points_ = 0, at_ = 0;
    double               row_us_ = -1, fixed_us_ = 0;
    bool                 one_size_ = true;  // the points hold one chunk size only
    std::int32_t         last_        = 0;  // the last chunk offered
    std::int32_t         since_plain_ = 0;  // steps with chunks since the last without
};

}  // namespace rest
