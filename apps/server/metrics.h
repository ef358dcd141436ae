// Server counters and their Prometheus text exposition (GET /metrics).
//
// Counters only grow; gauges (slots, queue, online store) are read at scrape time by the caller. Every member may
// be called from any thread: updates are a handful per request and one per engine step, so one mutex suffices.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

struct metrics_gauges {
    std::int32_t  n_slots = 0;
    std::int32_t  n_slots_busy = 0;
    std::int32_t  n_queued = 0;
    std::uint64_t history_tokens = 0;
    std::uint64_t history_documents = 0;
    bool          draining = false;
};

// One engine step over every active slot (one target forward pass).
struct step_sample {
    std::int32_t n_slots = 0;        // slots verified in this forward pass
    std::int64_t n_tokens = 0;       // tokens emitted over all slots
    std::int64_t n_drafted = 0;      // draft nodes verified
    std::int64_t n_accepted = 0;     // draft nodes accepted
    std::int64_t n_drafts = 0;       // slots that verified at least one draft node (vLLM's "drafts")
    std::vector<std::int64_t> n_accepted_at;  // [i]: slots whose accepted path reached draft position (depth) i
    std::int64_t n_forward = 0;      // llama_decode calls it took (1, or 2 after a memory fallback)
    double       t_draft_us = 0;
    double       t_verify_us = 0;
    double       t_step_us = 0;      // the whole step (draft, verify, sampling, publishing)

    // One slot's part of the step: it verified n_drafted draft nodes and accepted n_accepted of them. Accepted
    // nodes form a path from the root, so they sit at positions 0 .. n_accepted - 1.
    void add_draft(std::int64_t n_drafted, std::int64_t n_accepted);
};

class server_metrics {
  public:
    void on_request(const std::string & endpoint);
    void on_status(int status);
    // A request's prompt was processed: n_tokens prompt tokens, of which n_cached came from the prompt cache
    // (reused KV, not processed), in n_forward passes taking t_us.
    // A request got tokens t_s seconds after the step that last gave it some (its first tokens: none).
    void on_token_gap(double t_s);
    // Forward passes that carried only prompt rows (chunked prefill with nobody else generating).
    void on_prompt_passes(std::int64_t n_forward);
    void on_prefill(std::int64_t n_tokens, std::int64_t n_cached, std::int64_t n_forward, double t_us);
    void on_step(const step_sample & s);
    // A generation ended: reason is "stop", "length", "cancelled" or "error".
    void on_finish(const std::string & reason, std::int64_t n_prompt, std::int64_t n_completion, double t_queue_ms);
    void on_corpus_add(std::int64_t n_tokens);

    std::string prometheus(const metrics_gauges & g) const;

  private:
    void standard_families(std::string & out) const;

    mutable std::mutex                  mutex_;
    std::map<std::string, std::int64_t> requests_;   // by endpoint
    std::map<int, std::int64_t>         responses_;  // by HTTP status
    std::map<std::string, std::int64_t> finished_;   // by reason
    std::int64_t n_prompt_tokens_ = 0;
    std::int64_t n_cached_tokens_ = 0;
    std::vector<std::int64_t> itl_hist_;  // inter-token latency, per bucket (not cumulative)
    double                    t_itl_s_ = 0;
    std::vector<std::int64_t> prefill_hist_;  // requests by prefill time, per k_prefill_buckets (not cumulative)
    std::int64_t n_completion_tokens_ = 0;
    std::int64_t n_forward_ = 0;       // llama_decode calls: prompt chunks + steps
    std::int64_t n_steps_ = 0;         // forward passes that verified at least one slot
    std::int64_t n_slot_steps_ = 0;    // sum over steps of the slots in them: per-request forward passes
    std::int64_t n_step_tokens_ = 0;   // tokens emitted by steps
    std::int64_t n_drafted_ = 0;
    std::int64_t n_accepted_ = 0;
    std::int64_t n_drafts_ = 0;
    std::vector<std::int64_t> n_accepted_at_;  // by draft position
    std::int64_t n_corpus_tokens_ = 0;
    double       t_prefill_us_ = 0;
    double       t_draft_us_ = 0;
    double       t_verify_us_ = 0;
    double       t_step_us_ = 0;
    double       t_queue_ms_ = 0;
};
