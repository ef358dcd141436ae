// target_model over one llama_context. Two layouts:
//
// Chains (trees == false): llama.cpp's default layout, one sequence per slot. A request's draft is a chain, decoded in
// the slot's own sequence at n_past + 1, + 2, ...; commit removes the rejected tail of that sequence.
//
// Trees (trees == true): a unified KV memory shared by all slots.
//
// Sequence ids: slot s keeps its committed tokens in sequence s. Draft leaves borrow ids from the pool
// [n_slots, n_seq_max). Before a decode each borrowed id gets a copy of its slot's prefix (llama_memory_seq_cp
// only tags existing cells, it copies no data), and every tree node carries the ids of all leaves below it, so its
// first id's mask shows it exactly the prefix and its ancestors. After acceptance the accepted path is tagged with
// the slot's id and the borrowed ids are removed, which frees every rejected cell.
//
// Bit-exactness (one slot; CPU flash attention sums over cells in cell order): rows are laid out depth first (the
// best path right after the root), so the accepted path usually sits in consecutive cells after the slot's earlier
// ones. Where it leaves that path, commit keeps only the part in place and the next decode() puts the rest first
// (pending_), so the slot's cells stay in position order with no holes among them, as in plain decoding. This
// rests on llama.cpp's allocator filling the lowest free cells from where seq_rm freed them. With several slots
// the pool interleaves them and a slot's next rows can land below its earlier ones: not bit-exact. per_slot_target
// (per-slot-target.h) gives each slot a context of its own instead.
#pragma once

#include "llama-cpp.h"
#include "rest/llama-model.h"
#include "rest/target-model.h"

#include <vector>

namespace rest {

class llama_target final : public target_model {
  public:
    // What automatic settings (flash attention) depend on.
    struct hints {
        bool offloaded = false;  // the model runs (partly) on a GPU
        bool quantized = false;  // its weights are quantized (Q8_0, Q4_0, ...)
        bool quantized_v_cache = false;  // set by the constructor from context_params::cache_type_v
    };
    llama_target(llama_model * model, const context_params & params, hints h);
    ~llama_target() override;

    std::int32_t n_vocab() const override { return n_vocab_; }
    std::int32_t n_slots() const override { return n_slots_; }
    std::int32_t n_ctx_slot() const override { return n_ctx_slot_; }
    std::int32_t n_leaves_max() const override { return n_seq_max_ - n_slots_; }
    bool trees() const override { return trees_; }
    std::int32_t n_past(std::int32_t slot) const override { return n_past_[slot]; }
    std::int32_t n_threads() const override { return n_threads_; }
    std::int32_t n_rows_max() const override { return n_batch_; }
    void set_decode_threads(std::int32_t n) override { decode_threads_ = n > 0 ? n : n_threads_; }

    void prefill(std::int32_t slot, std::span<const token_id> tokens) override;
    decode_status decode(std::span<const tree_request> requests) override;
    std::span<const float> logits(std::int32_t request, std::int32_t node) const override;
    void commit(std::int32_t request, std::span<const std::int32_t> path) override;
    void clear(std::int32_t slot) override;
    std::int32_t keep_prefix(std::int32_t slot, std::int32_t n) override;
    void queue_prefill(std::int32_t slot, std::span<const token_id> tokens) override;
    std::int64_t n_forward() const override { return n_forward_; }
    std::int32_t n_pending(std::int32_t slot) const override { return (std::int32_t) pending_[slot].size(); }
    // Takes back the last decode(), which succeeded but must not count (per_slot_target: another slot's context failed
    // in the same step): its roots, trees and pending rows leave the memory, and the pending tokens are pending again,
    // so a retry decodes them as before. Prompt rows it carried stay: they are committed prompt either way.
    void undo_decode();

  private:
    struct request_layout {
        std::int32_t              slot = 0;
        std::int32_t              row0 = 0;     // batch row of the root; node i is row0 + 1 + pos_of[i] (trees)
        std::vector<std::int32_t> leaf_seq;     // node -> borrowed seq id of one leaf below it (-1: none yet)
        std::vector<std::int32_t> borrowed;     // seq ids lent to this request
        std::vector<std::int32_t> pos_of;       // trees: node -> its place in the rows after the root
        std::vector<token_id>     tokens;       // the request's node tokens
        std::vector<token_id>     pending;      // trees: the slot's pending tokens this decode put first (undo_decode)
    };

    void release_borrowed();
    // Puts queued prompt rows (queue_prefill) into the batch from `row` on; returns the next row.
    int32_t put_queued(int32_t row);
    void    flush_queued();  // runs them as passes of their own

    llama_context_ptr           ctx_;
    llama_memory_t              mem_ = nullptr;
    llama_batch                 batch_{};
    std::int32_t                n_vocab_ = 0;
    std::int32_t                n_slots_ = 1;
    std::int32_t                n_seq_max_ = 1;
    std::int32_t                n_ctx_slot_ = 0;
    std::int32_t                n_batch_ = 0;
    std::int32_t                n_threads_ = 1;       // the context's own (prefill)
    std::int32_t                decode_threads_ = 1;  // decode()'s
    std::int32_t                threads_now_ = 1;     // what llama.cpp was last told
    void use_threads(std::int32_t n);
    bool                        trees_ = true;
    std::vector<std::int32_t>   n_past_;   // per slot: positions emitted so far, pending tokens included
    std::vector<std::vector<token_id>> pending_;  // trees, per slot: accepted tokens to decode again at the head
                                                  // of the next batch, so that cells stay in position order
    std::vector<request_layout> layout_;
    struct queued_rows {
        std::int32_t              slot = 0;
        std::span<const token_id> tokens;
    };
    std::vector<queued_rows>    queued_;  // prompt chunks for the next decode()
    std::int64_t                n_forward_ = 0;
};

}  // namespace rest
