#include "rest/slot-batch.h"

#include <algorithm>
#include <stdexcept>

namespace rest {

namespace {

double now_us() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::micro>(clock::now().time_since_epoch()).count();
}

}  // namespace

slot_batch::slot_batch(decoder & dec, std::int32_t n_slots, std::int32_t n_batch, prefill_pacer_params pacing) :
    dec_(dec),
    n_batch_(std::max(1, n_batch)),
    pacer_(n_batch_, pacing),
    slots_((std::size_t) std::max(0, n_slots), nullptr),
    started_(slots_.size(), 0),
    memory_(slots_.size()) {}

std::int32_t slot_batch::free_slot() const {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (!slots_[i]) return (std::int32_t) i;
    }
    return -1;
}

std::int32_t slot_batch::free_slot_for(std::span<const token_id> prompt) const {
    std::int32_t best = -1;
    std::size_t  best_n = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i]) continue;
        const std::size_t n = n_reusable((std::int32_t) i, prompt);
        if (best < 0 || n > best_n) {
            best   = (std::int32_t) i;
            best_n = n;
        }
    }
    return best;
}

std::size_t slot_batch::n_reusable(std::int32_t slot, std::span<const token_id> prompt) const {
    const std::vector<token_id> & mem = memory_[(std::size_t) slot];
    const std::size_t             n   = std::min(mem.size(), prompt.size());
    return (std::size_t) (std::mismatch(mem.begin(), mem.begin() + (std::ptrdiff_t) n, prompt.begin()).first - mem.begin());
}

std::int32_t slot_batch::start(std::int32_t slot, request & r, std::span<const token_id> prompt, bool reuse) {
    if (slot < 0 || (std::size_t) slot >= slots_.size() || slots_[(std::size_t) slot]) {
        throw std::invalid_argument("slot_batch::start: slot " + std::to_string(slot) + " is not free");
    }
    r.slot                  = slot;
    const std::size_t  n    = reuse ? n_reusable(slot, prompt) : 0;
    std::vector<token_id> & mem = memory_[(std::size_t) slot];
    mem.clear();  // (begin() changes the memory: if it throws, nothing is known to be there)
    const std::int32_t kept = dec_.begin(r, prompt, (std::int32_t) n);  // throws before the slot is taken
    mem.assign(prompt.begin(), prompt.end());
    slots_[(std::size_t) slot]   = &r;
    started_[(std::size_t) slot] = ++n_started_;
    ++n_busy_;
    return kept;
}

request * slot_batch::oldest_prefilling() const {
    request * best = nullptr;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        request * r = slots_[i];
        if (r && !r->done() && r->prefilling() && (!best || started_[i] < started_[(std::size_t) best->slot])) {
            best = r;
        }
    }
    return best;
}

std::span<const std::int32_t> slot_batch::step() {
    live_.clear();
    for (request * r : slots_) {
        if (r && !r->done() && !r->prefilling()) live_.push_back(r);
    }
    request * prompt = oldest_prefilling();
    if (!live_.empty()) {
        const std::int32_t n  = prompt ? pacer_.next() : 0;
        const double       t0 = now_us();
        dec_.step(live_, n > 0 ? prompt : nullptr, n);
        pacer_.observe(now_us() - t0, n > 0 ? n : 0);
    } else if (prompt) {
        dec_.prefill(*prompt, n_batch_);  // nobody waits on this pass: a whole batch of the prompt
    }
    done_.clear();
    for (std::size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i] && slots_[i]->done()) done_.push_back((std::int32_t) i);
    }
    return done_;
}

void slot_batch::release(std::int32_t slot, bool keep) {
    if (slot < 0 || (std::size_t) slot >= slots_.size()) return;
    std::vector<token_id> & mem = memory_[(std::size_t) slot];
    if (request * r = slots_[(std::size_t) slot]) {
        slots_[(std::size_t) slot] = nullptr;
        --n_busy_;
        mem.insert(mem.end(), r->output.begin(), r->output.end());  // prompt + output ...
    }
    // ... as far as the memory holds them (the last emitted token is never in it).
    mem.resize(std::min(mem.size(), (std::size_t) std::max(0, dec_.model().n_past(slot))));
    if (!keep) {
        dec_.model().clear(slot);
        mem.clear();
    }
}

}  // namespace rest
