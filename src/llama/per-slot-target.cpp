#include "per-slot-target.h"

namespace rest {

per_slot_target::per_slot_target(std::vector<std::unique_ptr<llama_target>> slots) : slots_(std::move(slots)) {
    for (const auto & s : slots_) {
        if (s->n_slots() != 1 || !s->trees()) {
            throw std::logic_error("per_slot_target: every context must be a one-slot tree context");
        }
    }
}

void per_slot_target::set_decode_threads(std::int32_t n) {
    decode_threads_ = n;
}

decode_status per_slot_target::decode(std::span<const tree_request> requests) {
    slot_of_.clear();
    for (const auto & r : requests) {
        tree_request own = r;
        own.slot         = 0;
        // A slot without drafts runs a single row in a pass of its own, which must compute as plain decoding does:
        // on the context's threads (CPU flash attention splits a long KV cache by thread count for single rows).
        slots_[r.slot]->set_decode_threads(r.tokens.empty() ? 0 : decode_threads_);
        if (slots_[r.slot]->decode({&own, 1}) != decode_status::ok) {
            // The decoder retries the whole step with smaller trees: the slots already decoded must not keep theirs.
            for (const std::int32_t s : slot_of_) slots_[s]->undo_decode();
            slot_of_.clear();
            return decode_status::no_memory;
        }
        slot_of_.push_back(r.slot);
    }
    return decode_status::ok;
}

std::span<const float> per_slot_target::logits(std::int32_t request, std::int32_t node) const {
    return slots_[slot_of_[request]]->logits(0, node);
}

void per_slot_target::commit(std::int32_t request, std::span<const std::int32_t> path) {
    slots_[slot_of_[request]]->commit(0, path);
}

std::int64_t per_slot_target::n_forward() const {
    std::int64_t n = 0;
    for (const auto & s : slots_) n += s->n_forward();
    return n;
}

}  // namespace rest
