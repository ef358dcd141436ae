// The target model as the decoder sees it: a batched tree decoder with per-slot KV memory.
//
// The llama.cpp adapter implements it (src/llama/); tests implement it with fake models, so the speculation loop,
// the acceptance walk and the cost model are testable without llama.cpp.
//
// Slots are independent sequences (one per concurrent request). Each slot has committed tokens at positions
// [0, n_past). A step decodes, for each participating slot, its root (the last emitted token, not yet in memory)
// at position n_past and its draft nodes at n_past + depth, every node attending only to the committed prefix and
// its own ancestors. commit() then keeps the root and the accepted path and forgets every other node.
// An implementation may keep some committed tokens out of memory until the next decode() or prefill() of the slot
// (the llama.cpp tree layout does, to keep cells in position order); n_past counts them all the same, and they may
// add rows beyond n_rows_max to that pass (the adapter then decodes them in a pass of their own).
#pragma once

#include "rest/types.h"

#include <cstdint>
#include <span>

namespace rest {

struct tree_request {
    std::int32_t                  slot = 0;
    token_id                      root = 0;   // position n_past(slot)
    std::span<const token_id>     tokens;     // draft nodes, parents before children
    std::span<const std::int32_t> parents;    // -1: child of the root
    std::span<const std::int32_t> depths;     // >= 1
};

enum class decode_status {
    ok,
    no_memory,  // the KV memory cannot hold the batch: retry with smaller trees
};

class target_model {
  public:
    virtual ~target_model() = default;

    virtual std::int32_t n_vocab() const = 0;
    virtual std::int32_t n_slots() const = 0;
    // Most positions (committed tokens + tree cells) one slot may hold.
    virtual std::int32_t n_ctx_slot() const = 0;
    // Most draft leaves one decode() may carry in total over all requests (the adapter spends one sequence id each).
    virtual std::int32_t n_leaves_max() const = 0;
    // false: the memory keeps one sequence per slot, so each request's draft must be a single chain (node i's parent
    // is node i - 1). The decoder then verifies each tree's best path. Such a context skips the cost of tree
    // bookkeeping, which on small models outweighs what branches add.
    virtual bool trees() const { return true; }
    virtual std::int32_t n_past(std::int32_t slot) const = 0;
    // CPU threads of the context (what prefill() always uses), and the count the next decode() calls use: 0 restores
    // the context's own. A cost model sets it per batch size, since on small models fewer threads can be faster
    // (every graph node ends in a barrier). Models without threads ignore it.
    virtual std::int32_t n_threads() const { return 0; }
    // Most rows one decode() takes (llama.cpp's n_batch); more returns no_memory.
    virtual std::int32_t n_rows_max() const { return 1 << 30; }
    virtual void set_decode_threads(std::int32_t n) { (void) n; }

    // Appends tokens to a slot's committed memory without computing logits (prompt processing). Throws on failure.
    virtual void prefill(std::int32_t slot, std::span<const token_id> tokens) = 0;
    // One forward pass over every request's root and tree. Slots must be distinct.
    virtual decode_status decode(std::span<const tree_request> requests) = 0;
    // Logits of request r's node (node == -1: its root) from the last decode(). Valid until the next decode().
    virtual std::span<const float> logits(std::int32_t request, std::int32_t node) const = 0;
    // Commits request r's root and the accepted nodes `path` (root's child first) to its slot; discards the rest.
    virtual void commit(std::int32_t request, std::span<const std::int32_t> path) = 0;
    // Forgets a slot's memory (n_past becomes 0).
    virtual void clear(std::int32_t slot) = 0;
    // Keeps the first n committed positions of a slot and forgets the rest (a prompt cache reuses them for a new
    // request that starts with the same tokens). Returns how many were kept: min(n, n_past), or 0 for a model that
    // cannot keep part of a slot (then it cleared the slot).
    virtual std::int32_t keep_prefix(std::int32_t slot, std::int32_t n) {
        (void) n;
        clear(slot);
        return 0;
    }
    // Prompt tokens to append to a slot's committed memory (no logits) with the next decode(), whose requests must
    // not include that slot: a prompt processed in chunks, alongside other slots' steps. A layout that can put them in
    // the same forward pass does (one read of the weights for both); others run them as a pass of their own first.
    // The default prefills at once. tokens must stay valid until the next decode() returns.
    virtual void queue_prefill(std::int32_t slot, std::span<const token_id> tokens) { prefill(slot, tokens); }
    // Number of forward passes (decode and prefill calls that reached the model) so far.
    virtual std::int64_t n_forward() const = 0;
    // Committed tokens of a slot not yet in memory: rows the slot's next decode() adds before its root. Right after
    // commit() they are the accepted tokens it left out of place (generation_stats::n_recomputed counts them).
    virtual std::int32_t n_pending(std::int32_t slot) const { (void) slot; return 0; }
    // What the last decode() took, in microseconds, where the model knows better than a wall clock around the call
    // (a simulated target in tests; a device timer); < 0: unknown, the decoder measures.
    virtual double last_pass_us() const { return -1; }
};

}  // namespace rest
