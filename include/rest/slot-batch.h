// Continuous batching over a decoder's slots: requests start on free slots and advance together, one forward pass
// per step(). The server's engine and `rest bench --streams` both run their requests through it; what a request
// carries besides (jobs, text, metrics) stays with the caller.
#pragma once

#include "rest/decoder.h"

#include <cstdint>
#include <span>
#include <vector>

namespace rest {

class slot_batch {
  public:
    // dec (and the requests started on it) must outlive the batch; slots 0..n_slots-1 are the decoder's model's.
    slot_batch(decoder & dec, std::int32_t n_slots);

    // The lowest free slot, or -1 when all are occupied.
    std::int32_t free_slot() const;
    std::int32_t n_busy() const { return n_busy_; }
    // The request occupying `slot`, or nullptr.
    request * at(std::int32_t slot) const { return slots_[(std::size_t) slot]; }

    // Occupies the free `slot` with r (r.slot is set) and processes its prompt (decoder::start; throws as it does,
    // leaving the slot free). r must stay alive until release(slot).
    void start(std::int32_t slot, request & r, std::span<const token_id> prompt);
    // One forward pass over every occupied slot whose request is not done, in slot order. Returns the occupied slots
    // whose requests are done after it (done in this pass or before it, e.g. n_predict 0); they stay occupied until
    // release(). Throws what decoder::step throws.
    std::span<const std::int32_t> step();
    // Frees `slot`, whatever its request's state (done, cancelled, failed).
    void release(std::int32_t slot);

  private:
    decoder &               dec_;
    std::vector<request *>  slots_;
    std::int32_t            n_busy_ = 0;
    std::vector<request *>  live_;  // per-step scratch
    std::vector<std::int32_t> done_;
};

}  // namespace rest
