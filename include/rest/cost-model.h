// Verify cost t(rows, n_past) of one forward pass, measured rather than assumed: the prior of the budget policy.
//
// t depends on the batch rows (compute-bound on CPUs: 8 rows cost ~3x one; nearly flat on GPUs up to ~64) and on
// the context fill (attention reads every cached position). The table is measured at start-up (calibrate_cost),
// cached on disk by the front end, and corrected online by the policy from measured step times (src/decode).
#pragma once

#include "rest/target-model.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rest {

struct cost_table {
    std::vector<std::int32_t> rows;       // increasing batch sizes (>= 1)
    // Forward-pass time at each size with a short context, when the previous pass had the same size (llama.cpp
    // then reuses its compute graph). Not forced to grow with rows: on tiny models a 2-row pass can cost less than
    // a 1-row one (ggml's CPU sgemm needs at least 2 rows; one row goes through per-element dot products).
    std::vector<double>       t_us;
    double                    attn_us = 0;     // extra time per row per cached position (attention), >= 0
    double                    rebuild_us = 0;  // extra time of a pass whose size differs from the previous one's
    // CPU threads that gave t_us at each size (0 or empty: the context's own). Small models can run small batches faster on
    // fewer threads than the context has; the decoder sets this count per pass.
    std::vector<std::int32_t> threads;

    // Interpolated (linearly between measured sizes, extrapolated linearly past the last one); steady shape.
    double predict_us(std::int32_t n_rows, std::int32_t n_past) const;
    // Sizes increasing from 1 with a time each (and a thread count each, if any), and so every row of the batch grid.
    bool   valid() const;
    // Index of the measured size nearest to n_rows (ties: the larger); 0 for an empty table.
    std::size_t  nearest(std::int32_t n_rows) const;
    // The thread count measured fastest at the nearest size (0: the context's own).
    std::int32_t threads_for(std::int32_t n_rows) const;
    // The same for a pass over n_requests requests, each a chain of about n_rows / n_requests rows: the batch grid's
    // count when it was measured, else the context's own (0).
    std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const;

    // Passes over several requests, each verifying a chain of the same number of rows: the chain layout's batched
    // steps, every request's rows in its own sequence. They do not cost t(total rows): llama.cpp computes
    // attention per sequence, which dominates on small models. stories260K, 4 requests, measured: one row each
    // 0.69 ms (2 threads), two rows each 0.57 ms (1 thread), while one request's 8-row chain takes 0.53 ms.
    struct batch_costs {
        std::int32_t              requests = 0;  // >= 2
        std::vector<std::int32_t> per;           // rows per request, increasing from 1
        std::vector<double>       t_us;          // steady shape, short context
        std::vector<std::int32_t> threads;       // fastest count at each (0: the context's own)
    };
    std::vector<batch_costs> batches;  // increasing requests; empty: such passes are priced as t(total rows)

    // A pass of n_rows rows over n_requests equal chains: from the batch grid (linear in rows per request and in
    // requests, one request being the table above; past the largest measured count, proportional to requests),
    // or t(n_rows) without one.
    double predict_batch_us(std::size_t n_requests, std::int32_t n_rows, std::int32_t n_past) const;
    // Index into batches of the measured request count nearest to n_requests (ties: the larger), and within it the
    // nearest rows per request; {batches.size(), 0} without a grid or for one request.
    std::pair<std::size_t, std::size_t> nearest_batch(std::size_t n_requests, std::int32_t n_rows) const;

    // One-line text form for the on-disk cache: "rest-cost 4 <attn_us> <rebuild_us> <n> rows... t_us... threads...
    // <n_batches> then per batch <requests> <m> per... t_us... threads...".
    // parse() returns an invalid table for anything malformed or older (the cache is then simply re-measured).
    std::string        serialize() const;
    static cost_table  parse(const std::string & text);
};

struct calibrate_params {
    std::vector<std::int32_t> rows = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    std::int32_t              n_reps = 7;         // rounds over the sizes; each times n_block passes of one size
    std::int32_t              n_block = 3;        // the first pass of a block pays the graph rebuild, the rest not
    // Also time every size of 2+ rows on one thread when the context has more; dropped for larger sizes once it is
    // this much slower than the context's own count (so a big model pays one extra block). One row keeps the
    // context's count, as plain decoding (flash attention splits one row's KV range across threads).
    bool                      try_one_thread = true;
    double                    drop_slower = 1.5;
    std::int32_t              n_past_long = 256;  // second context fill, to fit attn_us
    double                    max_seconds = 20;   // stop adding sizes once calibration has taken this long
    // Batched passes (chain layout, several slots): rows per request, and their own time budget. Request counts:
    // 2, 4, 8, ... below the context's slots, and the slots themselves.
    std::vector<std::int32_t> per = {1, 2, 3, 4, 6, 8};
    double                    max_seconds_batches = 20;
    // Once one and two rows per request cost t(total rows) within this fraction at every request count, longer
    // chains are not measured (weight-bound models, where the grid would only repeat the one-request table).
    double                    grid_agree = 0.15;
};

// Measures t(rows) on `slot` of the model with throwaway chain drafts, then clears the slot. The slot must be idle.
// A context with several slots that verifies chains (target_model::trees() false) also gets the batch grid, measured
// on slots 0.. of each request count, which must then all be idle; they are cleared too.
cost_table calibrate_cost(target_model & model, std::int32_t slot, const calibrate_params & params = {});

// Warm-up before a context's first request, as llama.cpp warms a fresh context (common_init's warmup decode), but
// up to the sizes a policy will choose: a process's first forward pass of a size larger than any before runs cold
// (fresh compute-buffer pages). On the demo model a process's first 9-row pass took 626 us, its second 458; plain
// decoding pays this once, speculation once per size, inside a 10 ms generation. Leaves the slot empty. costs may
// be empty (plain decoding: one row only).
struct warm_up_result {
    std::int32_t rows = 0;  // the largest size that ran (one request): no pass up to it is a process's cold first
    double       t_us = 0;
};
warm_up_result warm_up(target_model & m, std::int32_t slot, const cost_table & costs, std::int32_t max_rows);
// What a tree step costs in a tree context, over a plain one, both measured here: passes of n_rows rows in `leaves`
// equal branches behind the root (in turn with half as many, twice as deep) and their commits, half of the first
// branch accepted or half of the last (decoded again in the next pass), against one-row passes and their commits: the
// mean over those four kinds of step, each its fastest. A branchy step pays what calibrate_cost's single-chain passes
// do not: a sequence per leaf, the mask over them, the cells dropped at commit, what llama.cpp rebuilds when a pass's
// shape changes (on an H200 the demo model's 8-node trees took 0.67 ms a step where its 9-row chains took 0.29 and
// the tree context's table said 0.21). In blocks; on the slot, which must be idle and is cleared.
// Returns <= 0 where it cannot run: no trees, n_rows - 1 not `leaves` branches of 2+ nodes, too few positions.
// tree_threads: the decode threads of the tree's pass (0: the context's own; a cost table's threads_for(n_rows)).
double tree_step_ratio(target_model & m, std::int32_t slot, std::int32_t n_rows, std::int32_t leaves,
                       std::int32_t tree_threads = 0, std::int32_t reps = 8);
// The batch grid alone (part of calibrate_cost), into table.batches; table.rows must hold the one-request sizes.
void calibrate_batches(target_model & model, cost_table & table, const calibrate_params & params = {});

}  // namespace rest
