// Continuous batching over a decoder's slots: requests start on free slots and advance together, one forward pass
// per step(). The server's engine and `rest bench --streams` both run their requests through it; what a request
// carries besides (jobs, text, metrics) stays with the caller.
//
// Prompt cache: a slot keeps its memory after release(), and a request started with `reuse` keeps the longest
// prefix of its prompt that the memory holds (llama-server's cache_prompt), so turn 2 of a chat processes only
// what turn 1 did not.
//
// Prompts are processed in chunks inside the steps (chunked prefill): while other requests generate, a step adds
// the prompt tokens the pacer allows (prefill-pacer.h), so a long prompt never stops the other streams for its
// whole duration; with nothing else generating, a step processes up to a whole batch of it. Prompts are
// processed one at a time, in the order their requests started.
#pragma once

#include "rest/decoder.h"
#include "rest/prefill-pacer.h"

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace rest {

class slot_batch {
  public:
    // dec (and the requests started on it) must outlive the batch; slots 0..n_slots-1 are the decoder's model's.
    // n_batch: most prompt tokens one step processes (llama.cpp's n_batch).
    slot_batch(decoder & dec, std::int32_t n_slots, std::int32_t n_batch = 512, prefill_pacer_params pacing = {});

    // The lowest free slot, or -1 when all are occupied.
    std::int32_t free_slot() const;
    // The free slot whose memory shares the longest prefix with prompt (the lowest among equals), or -1.
    std::int32_t free_slot_for(std::span<const token_id> prompt) const;
    // How many leading tokens of prompt the slot's memory holds (what start() with reuse keeps, up to the root).
    std::size_t n_reusable(std::int32_t slot, std::span<const token_id> prompt) const;
    std::int32_t n_busy() const { return n_busy_; }
    // The request occupying `slot`, or nullptr.
    request * at(std::int32_t slot) const { return slots_[(std::size_t) slot]; }

    // Occupies the free `slot` with r (r.slot is set); its prompt is processed by the coming steps (decoder::begin;
    // throws as begin does, leaving the slot free). With reuse, the slot's memory keeps the prefix it shares with
    // the prompt (r.stats.n_cached). Returns the positions kept. r must stay alive until release(slot).
    std::int32_t start(std::int32_t slot, request & r, std::span<const token_id> prompt, bool reuse = false);
    // One forward pass over every occupied slot whose request is ready and not done, in slot order, with the next
    // chunk of the oldest prompt still being processed. Returns the occupied slots whose requests are done after it
    // (done in this pass or before it, e.g. n_predict 0); they stay occupied until release(). Throws what
    // decoder::step throws.
    std::span<const std::int32_t> step();
    // Frees `slot`, whatever its request's state (done, cancelled, failed). keep: its memory stays for a request
    // that starts alike (call it before the request's output is moved away); otherwise it is cleared.
    void release(std::int32_t slot, bool keep = true);

    const prefill_pacer & pacer() const { return pacer_; }

  private:
    request * oldest_prefilling() const;

    decoder &                  dec_;
    std::int32_t               n_batch_;
    prefill_pacer              pacer_;
    std::vector<request *>     slots_;
    std::vector<std::uint64_t> started_;  // per slot: when its request started (an increasing count)
    // Per slot: the tokens its memory holds (after release) or will hold (the prompt of the request in it).
    std::vector<std::vector<token_id>> memory_;
    std::uint64_t              n_started_ = 0;
    std::int32_t               n_busy_ = 0;
    std::vector<request *>     live_;  // per-step scratch
    std::vector<std::int32_t>  done_;
};

}  // namespace rest
