// `rest bench --streams 1,4,8`: aggregate throughput of concurrent requests, speculation on vs off, in one process.
//
// It drives the decoder exactly as the server's engine does (one slot per stream in one context, every active
// request advanced by one batched forward pass per step, a finished request's slot refilled from the prompt queue
// at once), without HTTP, so the client's own CPU use and socket scheduling cannot tilt the comparison. Per
// repetition and stream count, plain decoding and REST (a fresh adaptive budget and online store, as a fresh server
// has) run the same prompt list, in alternating order. Plain runs on a context with the same slots and layout
// (rest serve --no-spec does too).
#pragma once

#include "../session.h"

#include <string>
#include <vector>

namespace bench {

struct streams_params {
    std::vector<std::int32_t>             streams;    // concurrency levels
    std::int32_t                          reps = 3;
    std::int32_t                          n_predict = 128;
    std::vector<std::vector<rest::token_id>> prompts;
    rest::context_params                  ctx;        // the session's context settings (plain gets the same)
    rest::drafter_params                  draft;
    std::int32_t                          n_draft_max = -1;  // -1: draft.n_budget_max
    std::string                           out_dir;    // writes streams.json and streams.md
};

// Prints the table (markdown) to stdout and writes it with the raw repetitions under out_dir.
void run_streams(session & s, const streams_params & p);

}  // namespace bench
