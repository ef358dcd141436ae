// The slot scheduler: one engine thread owns the llama.cpp context and the decoder, and advances every active
// request by one forward pass per step (continuous batching).
//
// HTTP threads only submit jobs and wait on them (job.h). Jobs beyond the slots wait in a FIFO queue (bounded:
// submit() refuses beyond queue_max). Per iteration the engine admits queued jobs into free slots (prompt
// processing), drops cancelled jobs (a disconnected client's slot is free before the next step), runs one
// decoder step over all active slots, publishes the text each released and retires finished requests.
#pragma once

#include "background-queue.h"
#include "corpora.h"
#include "job.h"
#include "metrics.h"

#include "rest/decoder.h"
#include "rest/slot-batch.h"
#include "rest/drafter.h"
#include "rest/llama-model.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace rest {
class datastore;
class history_store;
}  // namespace rest

struct engine_params {
    bool                 speculate   = true;  // false: plain decoding for every request
    std::int32_t         n_draft_max = 0;     // draft nodes per slot and step offered to the budget policy
    std::int32_t         queue_max   = 512;
    rest::prefill_pacer_params pacing;
    rest::drafter_params draft;
    bool                 warm_up = true;  // before the first request, on the engine thread (rest::decoder::warm_up)
    rest::cost_table     costs;           // the sizes the warm-up may run (empty: one row)
};

struct engine_load {
    std::int32_t n_slots = 0;
    std::int32_t n_busy = 0;
    std::int32_t n_queued = 0;
    bool         draining = false;
};

class engine {
  public:
    // Everything passed in must outlive the engine. The context's slots are the engine's slots.
    // corpora: what requests draft from (may be null: none).
    engine(const rest::model & model, rest::target_model & ctx, const corpus_set * corpora,
           rest::history_store * history, rest::budget_policy * policy, const engine_params & params,
           server_metrics & metrics);
    ~engine();
    engine(const engine &) = delete;
    engine & operator=(const engine &) = delete;

    // Starts the engine thread and returns once it has warmed the context up (engine_params::warm_up).
    void start();

    enum class submit_result { ok, queue_full, draining };
    submit_result submit(const std::shared_ptr<job> & j);
    // Wakes the engine after job::cancel(), so a queued job leaves the queue promptly.
    void wake();

    // Shutdown, in order: drain() refuses new jobs; wait_idle() waits for the queue and slots to empty;
    // stop() cancels whatever is left and joins the engine thread.
    void drain();
    bool wait_idle(std::chrono::steady_clock::time_point deadline);
    void stop();

    engine_load load() const;

  private:
    struct slot;

    void loop();
    void warm_up();
    enum class end_kind { finished, cancelled, shutdown };
    void begin(slot & s, std::shared_ptr<job> j);
    slot * pick_slot(const job_input & in);  // under mutex_; nullptr: no free slot
    void report_prefill(slot & s);           // metrics, once its prompt is processed
    void end(slot & s, end_kind kind);
    // How far a request's log probabilities have been handed out: tokens, and the bytes of their pieces.
    struct logprob_cursor {
        std::size_t next  = 0;
        std::size_t bytes = 0;
    };
    std::vector<position_logprobs> logprobs_of_text(const rest::request & r, std::size_t text_bytes,
                                                    logprob_cursor & from) const;
    text_release release(slot & s, bool final);
    void fail_active(const std::string & message);

    const rest::model &                  model_;
    rest::target_model &                 ctx_;
    const corpus_set *                   corpora_;
    rest::history_store *                history_;
    engine_params                        params_;
    server_metrics &                     metrics_;
    std::unique_ptr<rest::decoder>       decoder_;
    std::unique_ptr<rest::slot_batch>    batch_;  // the slots' requests, advanced together (engine thread only)
    std::vector<std::unique_ptr<slot>>   slots_;  // engine thread only (busy flags also under mutex_)

    mutable std::mutex                     mutex_;
    std::condition_variable                cv_;       // engine waits for work
    std::condition_variable                cv_idle_;  // wait_idle() waits for an empty engine
    std::deque<std::shared_ptr<job>>       queue_;
    std::int32_t                           n_busy_ = 0;
    bool                                   draining_ = false;
    bool                                   stop_ = false;
    std::thread                            thread_;
    background_queue                       background_;  // online-store additions; declared last: stops first
};
