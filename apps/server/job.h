// One generation request in flight between an HTTP thread and the engine thread.
//
// The HTTP thread builds the input, submits the job to the engine and then waits on it; the engine publishes
// released text as it is generated and finishes the job exactly once (success, error or cancellation). Both
// sides hold a shared_ptr, so whichever lets go last frees it: a client that disconnects never leaves the engine
// with a dangling job, and an engine that finishes early never leaves the client waiting forever.
#pragma once

#include "rest/decoder.h"
#include "rest/sampler.h"
#include "rest/types.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

struct job_input {
    std::vector<rest::token_id> prompt;           // tokenized, checked against the context
    std::int32_t                n_predict = -1;   // -1: until EOG or the slot's context end
    rest::sampler_params        sampling;
    std::vector<std::string>    stop;
    bool                        speculate   = true;
    bool                        cache_prompt = true;  // start on the free slot whose memory shares most of the prompt
    std::int32_t                n_draft_max = -1; // per-request cap (-1: the server's)
    std::int32_t                n_logprobs  = -1; // >= 0: log probabilities with this many alternatives
    std::vector<rest::token_id> prediction;       // the predicted output, tokenized (drafts only)
    std::vector<std::string>    corpora;          // the corpora to draft from (rest's `corpus` field); empty: all
};

// A completion token's log probability as a response shows it: its text piece, and the most likely alternatives.
struct piece_logprob {
    std::string piece;
    float       logprob = 0;
};
struct position_logprobs {
    piece_logprob              chosen;
    std::vector<piece_logprob> top;
};

// Text the engine released to the client, with the log probabilities of exactly the tokens whose pieces start in
// it (start before its end, counted from the first byte of the completion): the tokens that make the text, even
// when part of a piece is still held back. Concatenated over a job, they are job_output::logprobs.
struct text_release {
    std::string                    text;
    std::vector<position_logprobs> logprobs;  // empty unless the job asked for them

    bool empty() const { return text.empty() && logprobs.empty(); }
    void append(text_release && more);
};

struct job_output {
    int         error_status = 0;  // non-zero: the job failed with this HTTP status and error message
    std::string error;
    std::string finish_reason;     // "stop" | "length" | "cancelled"
    std::int64_t n_prompt = 0;
    std::int64_t n_completion = 0;
    std::vector<rest::token_id> tokens;
    std::vector<position_logprobs> logprobs;  // the tokens of the returned text (not EOG, not past a stop string)
    rest::generation_stats      stats;
    std::int32_t slot = -1;
    double       t_queue_ms = 0;   // submit to slot
};

class job {
  public:
    explicit job(job_input in) : in_(std::move(in)), t_submit_(std::chrono::steady_clock::now()) {}

    const job_input & input() const { return in_; }
    std::chrono::steady_clock::time_point t_submit() const { return t_submit_; }

    // Engine side.
    void publish(text_release released);
    void finish(job_output out);

    // HTTP side: waits up to `timeout` for news, appends what was released to `got`; true once finished (output()
    // is then final and nothing more will come).
    bool wait(std::chrono::milliseconds timeout, text_release & got);
    const job_output & output() const { return out_; }  // only after wait() returned true

    // Either side: the client is gone or the server gives up. The engine frees the slot at its next iteration.
    void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
    bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  private:
    const job_input                             in_;
    const std::chrono::steady_clock::time_point t_submit_;
    std::mutex                                  mutex_;
    std::condition_variable                     cv_;
    text_release                                pending_;
    bool                                        finished_ = false;
    job_output                                  out_;
    std::atomic<bool>                           cancelled_{false};
};
