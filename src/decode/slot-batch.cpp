#include "rest/slot-batch.h"

#include <stdexcept>

namespace rest {

slot_batch::slot_batch(decoder & dec, std::int32_t n_slots) : dec_(dec), slots_((std::size_t) std::max(0, n_slots), nullptr) {}

std::int32_t slot_batch::free_slot() const {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (!slots_[i]) return (std::int32_t) i;
    }
    return -1;
}

void slot_batch::start(std::int32_t slot, request & r, std::span<const token_id> prompt) {
    if (slot < 0 || (std::size_t) slot >= slots_.size() || slots_[(std::size_t) slot]) {
        throw std::invalid_argument("slot_batch::start: slot " + std::to_string(slot) + " is not free");
    }
    r.slot = slot;
    dec_.start(r, prompt);  // throws before the slot is taken
    slots_[(std::size_t) slot] = &r;
    ++n_busy_;
}

std::span<const std::int32_t> slot_batch::step() {
    live_.clear();
    for (request * r : slots_) {
        if (r && !r->done()) live_.push_back(r);
    }
    if (!live_.empty()) dec_.step(live_);
    done_.clear();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i] && slots_[i]->done()) done_.push_back((std::int32_t) i);
    }
    return done_;
}

void slot_batch::release(std::int32_t slot) {
    if (slot >= 0 && (std::size_t) slot < slots_.size() && slots_[(std::size_t) slot]) {
        slots_[(std::size_t) slot] = nullptr;
        --n_busy_;
    }
}

}  // namespace rest
