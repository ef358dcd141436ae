// The tree layout with one llama.cpp context per slot (context_params::context_per_slot).
//
// Several slots in one unified KV pool are not bit-exact with plain decoding: the pool interleaves their cells, and
// llama.cpp's allocator hands a slot's next rows the lowest free cells, often below its earlier ones, so attention
// sums in another order (test-llama-exact-quantized: 5 of 10 outputs of four slots differ). Here each slot owns a
// one-slot tree context, where llama_target keeps the cells in position order (llama-context.h), so every slot
// computes exactly what plain decoding computes. The price: a step runs one forward pass per slot instead of one for
// all (the weights are read once per slot), and each context holds its own compute buffers. The weights are shared.
#pragma once

#include "llama-context.h"

#include <memory>
#include <vector>

namespace rest {

class per_slot_target final : public target_model {
  public:
    explicit per_slot_target(std::vector<std::unique_ptr<llama_target>> slots);

    std::int32_t n_vocab() const override { return slots_[0]->n_vocab(); }
    std::int32_t n_slots() const override { return (std::int32_t) slots_.size(); }
    std::int32_t n_ctx_slot() const override { return slots_[0]->n_ctx_slot(); }
    // One context's: each request's tree goes to its own context, which lends this many, but the decoder shares the
    // figure out among the live requests as a total. Conservative: trees get the share they would in one pool.
    std::int32_t n_leaves_max() const override { return slots_[0]->n_leaves_max(); }
    bool trees() const override { return true; }
    std::int32_t n_past(std::int32_t slot) const override { return slots_[slot]->n_past(0); }
    std::int32_t n_threads() const override { return slots_[0]->n_threads(); }
    std::int32_t n_rows_max() const override { return slots_[0]->n_rows_max(); }
    void set_decode_threads(std::int32_t n) override;

    void prefill(std::int32_t slot, std::span<const token_id> tokens) override { slots_[slot]->prefill(0, tokens); }
    decode_status decode(std::span<const tree_request> requests) override;
    std::span<const float> logits(std::int32_t request, std::int32_t node) const override;
    void commit(std::int32_t request, std::span<const std::int32_t> path) override;
    void clear(std::int32_t slot) override { slots_[slot]->clear(0); }
    std::int32_t keep_prefix(std::int32_t slot, std::int32_t n) override { return slots_[slot]->keep_prefix(0, n); }
    // A prompt chunk goes to its slot's context at once: it shares no pass with other slots in this layout.
    void queue_prefill(std::int32_t slot, std::span<const token_id> tokens) override { prefill(slot, tokens); }
    std::int64_t n_forward() const override;
    std::int32_t n_pending(std::int32_t slot) const override { return slots_[slot]->n_pending(0); }

  private:
    std::vector<std::unique_ptr<llama_target>> slots_;
    std::int32_t                               decode_threads_ = 0;  // what the decoder set (0: the context's own)
    std::vector<std::int32_t>                  slot_of_;  // request of the last decode() -> its slot
};

}  // namespace rest
