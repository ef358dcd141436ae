#include "llama-context.h"

#include "llama-util.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace rest {

namespace {

llama_flash_attn_type flash_attn_type(std::int32_t setting, llama_target::hints h) {
    if (setting == 0) return LLAMA_FLASH_ATTN_TYPE_DISABLED;
    if (setting == 1) return LLAMA_FLASH_ATTN_TYPE_ENABLED;
    // GPUs: llama.cpp's choice. CPUs, measured (bench/bench-verify-shapes, /tmp drift probes):
    //  - quantized weights: with flash attention a row's logits are bit-identical whether it is decoded alone or in
    //    a batch, so verification reproduces plain decoding exactly; without it they drift (up to 0.8 in logits on
    //    the 1.1B Q8_0/Q4_0 fixtures, enough to flip argmaxes). It is also faster there (t(8)/t(1) 4.6 vs 6.0).
    //  - F32/F16 weights: rows drift slightly either way (matrix-vector vs matrix-matrix kernels), and the plain
    //    attention is much faster on small models (stories260K: t(1) 0.18 vs 0.31 ms, t(8)/t(1) 3.0 vs 5.7).
    //  - a quantized V cache needs flash attention in llama.cpp.
    if (h.offloaded) return LLAMA_FLASH_ATTN_TYPE_AUTO;
    return h.quantized || h.quantized_v_cache ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
}

// Position of each node in a depth-first (preorder) walk of the tree, children in index order. Parents come first,
// so subtree sizes add up backwards, and each child starts where its earlier siblings' subtrees end: two flat passes.
std::vector<int32_t> depth_first_positions(std::span<const int32_t> parents) {
    const int32_t n = (int32_t) parents.size();
    for (int32_t i = 0; i < n; ++i) {
        if (parents[i] < -1 || parents[i] >= i) {
            throw std::invalid_argument("draft tree: a node's parent does not precede it");
        }
    }
    std::vector<int32_t> size(n, 1), pos(n), next(n + 1, 0);  // next[v + 1]: where v's next child goes
    for (int32_t i = n - 1; i >= 0; --i) {
        if (parents[i] >= 0) size[parents[i]] += size[i];
    }
    for (int32_t i = 0; i < n; ++i) {
        pos[i] = next[parents[i] + 1];
        next[parents[i] + 1] += size[i];
        next[i + 1] = pos[i] + 1;
    }
    return pos;
}

// A KV cache type by llama.cpp's name for it (-ctk / -ctv). The CLI checks names against the same list.
ggml_type kv_cache_type(const std::string & name) {
    static const std::pair<const char *, ggml_type> k_types[] = {
        {"f16", GGML_TYPE_F16},   {"f32", GGML_TYPE_F32},   {"bf16", GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0},
        {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1}, {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1},
        {"iq4_nl", GGML_TYPE_IQ4_NL},
    };
    for (const auto & [n, t] : k_types) {
        if (name == n) return t;
    }
    throw user_error("unknown KV cache type '" + name + "' (f16, f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)");
}

// The model's key head size: the architecture's attention.key_length, else n_embd / n_head (0: unknown).
std::int32_t key_head_size(const llama_model * model) {
    char arch[64] = {}, buf[32] = {};
    if (llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch) > 0 &&
        llama_model_meta_val_str(model, (std::string(arch) + ".attention.key_length").c_str(), buf, sizeof buf) > 0) {
        return std::atoi(buf);
    }
    const std::int32_t heads = llama_model_n_head(model);
    return heads > 0 ? llama_model_n_embd(model) / heads : 0;
}

// Asked for more, llama.cpp tries to allocate it (a billion positions of stories260K grew by 330 MB/s for a minute).
constexpr std::int32_t k_n_ctx_max = 1 << 24;

}  // namespace

llama_target::llama_target(llama_model * model, const context_params & params, hints h) {
    n_slots_ = std::max(1, params.n_slots);
    if (n_slots_ >= 256) {
        throw user_error("at most 255 slots are supported (llama.cpp allows 256 sequence ids per context)");
    }
    llama_context_params cp = llama_context_default_params();
    const int32_t n_ctx_train = llama_model_n_ctx_train(model);
    if (params.n_threads < 0 || params.n_batch < 1 || params.n_ctx < 0) {
        throw user_error("threads (" + std::to_string(params.n_threads) + ", 0: all), batch size (" +
                         std::to_string(params.n_batch) + ") and context size (" + std::to_string(params.n_ctx) +
                         ", 0: the model's) must not be negative; the batch size must be at least 1");
    }
    if (params.n_ctx > k_n_ctx_max) {
        throw user_error("a context of " + std::to_string(params.n_ctx) +
                         " positions is more than any model holds (at most " + std::to_string(k_n_ctx_max) + ")");
    }
    int32_t       n_ctx       = params.n_ctx > 0 ? params.n_ctx : std::min(n_ctx_train, 4096) * n_slots_;
    // llama.cpp rounds the context up to a multiple of 256 after it has capped n_batch at the size asked for: a
    // context asked at the model's 128 positions (stories260K) holds 256, but llama_decode asserted (an abort) on
    // any prompt chunk over 128. Asked rounded, the context is the same and n_batch is what we ask.
    n_ctx         = (n_ctx + 255) / 256 * 256;
    cp.n_ctx      = n_ctx;
    n_batch_      = std::max(params.n_batch, 64);
    cp.n_batch    = n_batch_;
    cp.n_ubatch   = n_batch_;
    trees_ = params.trees;
    if (trees_) {
        // The pool beyond the slots lends one id per draft leaf; LLAMA_MAX_SEQ (256) bounds the total.
        n_seq_max_    = std::min(256, n_slots_ + std::max(1, params.n_leaves_max));
        cp.kv_unified = true;  // one cell pool: sequence ids tag shared cells instead of copying them
    } else {
        // Chains live in the slot's own sequence: llama.cpp's default layout, no pool. (A unified pool makes every
        // llama_decode loop over all 256 possible sequence ids, squared.)
        n_seq_max_    = n_slots_;
        cp.kv_unified = false;
    }
    cp.n_seq_max  = n_seq_max_;
    // llama.cpp sizes its output buffer for at least n_seq_max rows, and asserts that this fits n_outputs_max,
    // which defaults to n_batch (clamped to n_ctx): small contexts would abort without this.
    cp.n_outputs_max = std::max<uint32_t>(n_batch_, n_seq_max_);
    const int32_t n_threads =
        params.n_threads > 0 ? params.n_threads : std::max(1, (int32_t) std::thread::hardware_concurrency());
    cp.n_threads       = n_threads;
    cp.n_threads_batch = n_threads;
    n_threads_ = decode_threads_ = threads_now_ = n_threads;
    cp.no_perf         = true;
    cp.type_k          = kv_cache_type(params.cache_type_k);
    // llama.cpp refuses such a K cache with flash attention on; off, it ran and wrote garbage (stories260K's 8-value
    // heads in q8_0's 32-value blocks).
    if (const std::int32_t head = key_head_size(model); ggml_is_quantized(cp.type_k) && head > 0 &&
                                                        head % (std::int32_t) ggml_blck_size(cp.type_k) != 0) {
        throw user_error("--cache-type-k " + params.cache_type_k + ": its blocks of " +
                         std::to_string(ggml_blck_size(cp.type_k)) + " values do not divide the model's key heads of " +
                         std::to_string(head));
    }
    cp.type_v          = kv_cache_type(params.cache_type_v);
    h.quantized_v_cache = ggml_is_quantized(cp.type_v);
    cp.flash_attn_type = flash_attn_type(params.flash_attn, h);
    ctx_.reset(llama_init_from_model(model, cp));
    if (!ctx_) {
        throw user_error("cannot create a llama.cpp context (n_ctx " + std::to_string(n_ctx) + "): " + llama_last_error());
    }
    // Whatever a llama.cpp build does with the sizes asked, a pass must fit the batch it has (it asserts otherwise).
    n_batch_    = std::min<int32_t>(n_batch_, (int32_t) llama_n_batch(ctx_.get()));
    mem_        = llama_get_memory(ctx_.get());
    n_vocab_    = llama_vocab_n_tokens(llama_model_get_vocab(model));
    n_ctx_slot_ = (int32_t) llama_n_ctx(ctx_.get()) / n_slots_;
    n_past_.assign(n_slots_, 0);
    pending_.assign(n_slots_, {});
    batch_ = llama_batch_init(n_batch_, 0, n_seq_max_);
}

llama_target::~llama_target() {
    llama_batch_free(batch_);
}

void llama_target::prefill(std::int32_t slot, std::span<const token_id> tokens_in) {
    if (n_past_[slot] + (int32_t) tokens_in.size() > n_ctx_slot_) {
        throw user_error("the prompt (" + std::to_string(tokens_in.size()) + " tokens) does not fit the context (" +
                         std::to_string(n_ctx_slot_) + " positions per slot)");
    }
    // Tokens a tree commit left pending (not yet in the KV memory; n_past_ counts them) come first.
    std::vector<token_id>     joined;
    std::span<const token_id> tokens = tokens_in;
    if (!pending_[slot].empty()) {
        joined = std::move(pending_[slot]);
        pending_[slot].clear();
        n_past_[slot] -= (int32_t) joined.size();
        joined.insert(joined.end(), tokens_in.begin(), tokens_in.end());
        tokens = joined;
    }
    use_threads(n_threads_);
    for (size_t off = 0; off < tokens.size(); off += n_batch_) {
        const size_t n = std::min(tokens.size() - off, (size_t) n_batch_);
        batch_.n_tokens = (int32_t) n;
        for (size_t i = 0; i < n; ++i) {
            batch_.token[i]     = tokens[off + i];
            batch_.pos[i]       = n_past_[slot] + (llama_pos) i;
            batch_.n_seq_id[i]  = 1;
            batch_.seq_id[i][0] = slot;
            batch_.logits[i]    = 0;
        }
        const int32_t rc = llama_decode(ctx_.get(), batch_);
        ++n_forward_;
        if (rc != 0) {
            throw std::runtime_error("llama_decode failed during prompt processing (code " + std::to_string(rc) + ")");
        }
        n_past_[slot] += (int32_t) n;
    }
}

void llama_target::use_threads(std::int32_t n) {
    if (n != threads_now_) {
        llama_set_n_threads(ctx_.get(), n, n);  // cheap: read by the next llama_decode
        threads_now_ = n;
    }
}

decode_status llama_target::decode(std::span<const tree_request> requests) {
    release_borrowed();
    use_threads(decode_threads_);
    layout_.resize(requests.size());  // every field is set below: reusing them keeps their buffers

    int32_t n_rows = 0, n_pending = 0, n_queued = 0, rows_max = 0, slot_min = n_slots_;
    for (const auto & r : requests) {
        n_rows += 1 + (int32_t) r.tokens.size();
        n_pending += (int32_t) pending_[r.slot].size();
        rows_max = std::max(rows_max, 1 + (int32_t) r.tokens.size());
        slot_min = std::min(slot_min, r.slot);
    }
    for (const auto & q : queued_) n_queued += (int32_t) q.tokens.size();
    // Queued prompt rows share the pass. In the tree layout (one unified pool) llama.cpp runs the batch as one ubatch.
    // With a sequence per slot it splits the batch into passes of equal rows per sequence over consecutive slots, so
    // a prompt shares the chains' pass only with as many rows as they have, and only next to their slots (otherwise
    // llama.cpp runs it as a pass of its own after theirs, which costs what a pass first would). A shorter prompt
    // would cut a chain over two passes, and a longer one leaves a pass of its remaining rows that costs about what
    // the whole chunk would alone (measured, TinyLlama-shaped Q4_0, 2 threads: plain step 70 ms; one prompt row
    // shared 106-118 ms, alone first 151-162; four rows shared 279-290, alone first 236-239): those go first, alone.
    const bool share_chains = queued_.size() == 1 && n_queued == rows_max;
    if (!queued_.empty() && ((!trees_ && !share_chains) || n_rows + n_pending + n_queued > n_batch_)) {
        flush_queued();
        n_queued = 0;
    }
    // llama.cpp groups sequences in the order they first appear: a prompt on a lower slot goes before the requests.
    const bool queued_first = !trees_ && !queued_.empty() && queued_[0].slot < slot_min;
    if (n_rows > n_batch_) {
        return decode_status::no_memory;
    }
    if (n_rows + n_pending + n_queued > n_batch_) {
        // The decoder sized the pass without the pending rows: decode them first, in a pass of their own.
        for (const auto & r : requests) {
            prefill(r.slot, {});
        }
        use_threads(decode_threads_);
    }

    int32_t next_seq = n_slots_;
    int32_t row      = queued_first ? put_queued(0) : 0;
    for (size_t ri = 0; ri < requests.size(); ++ri) {
        const tree_request & r  = requests[ri];
        request_layout &     lo = layout_[ri];
        const int32_t        n  = (int32_t) r.tokens.size();
        lo.slot = r.slot;
        lo.row0 = row;
        lo.leaf_seq.assign(n, -1);
        lo.pos_of.clear();
        lo.tokens.assign(r.tokens.begin(), r.tokens.end());
        lo.pending = pending_[r.slot];

        const llama_pos p0  = n_past_[r.slot];
        auto            put = [&](token_id tok, llama_pos pos, std::span<const llama_seq_id> ids, bool logits = true) {
            batch_.token[row]    = tok;
            batch_.pos[row]      = pos;
            batch_.n_seq_id[row] = (int32_t) ids.size();
            std::copy(ids.begin(), ids.end(), batch_.seq_id[row]);
            batch_.logits[row] = logits;
            ++row;
        };
        if (!trees_) {
            // A chain, all in the slot's own sequence.
            const llama_seq_id own[1] = {r.slot};
            for (int32_t i = 0; i < n; ++i) {
                if (r.parents[i] != i - 1) {
                    return decode_status::no_memory;  // a branch: this layout verifies chains only
                }
            }
            put(r.root, p0, own);
            for (int32_t i = 0; i < n; ++i) {
                put(r.tokens[i], p0 + r.depths[i], own);
            }
            continue;
        }

        // Rows follow a depth-first order of the tree, first children first (the drafter lists the best child
        // first), so the best path sits in consecutive rows right after the root: see commit().
        lo.pos_of = depth_first_positions(r.parents);
        std::vector<int32_t> node_at(n);
        for (int32_t i = 0; i < n; ++i) node_at[lo.pos_of[i]] = i;

        // Leaves (nodes nobody names as parent) each borrow a sequence id; the ids propagate to every ancestor.
        std::vector<char> has_child(n, 0);
        for (int32_t i = 0; i < n; ++i) {
            if (r.parents[i] >= 0) {
                has_child[r.parents[i]] = 1;
            }
        }
        std::vector<std::vector<llama_seq_id>> seqs(n);
        std::vector<llama_seq_id>              root_seqs = {r.slot};
        for (int32_t i = 0; i < n; ++i) {
            if (has_child[i]) {
                continue;
            }
            if (next_seq >= n_seq_max_) {
                release_borrowed();
                return decode_status::no_memory;
            }
            const int32_t s = next_seq++;
            lo.borrowed.push_back(s);
            llama_memory_seq_cp(mem_, r.slot, s, -1, -1);
            for (int32_t v = i; v >= 0; v = r.parents[v]) {
                seqs[v].push_back(s);
                lo.leaf_seq[v] = s;
            }
            root_seqs.push_back(s);
        }
        // Accepted tokens whose cells a previous commit dropped (they were out of place) go first, seen by every
        // node of the tree; their logits are not needed.
        const std::vector<token_id> & pend = pending_[r.slot];
        for (size_t j = 0; j < pend.size(); ++j) {
            put(pend[j], p0 - (llama_pos) (pend.size() - j), root_seqs, false);
        }
        lo.row0 = row;
        put(r.root, p0, root_seqs);
        for (int32_t k = 0; k < n; ++k) {
            const int32_t i = node_at[k];
            put(r.tokens[i], p0 + r.depths[i], seqs[i]);
        }
    }
    if (!queued_first) row = put_queued(row);
    batch_.n_tokens = row;

    const int32_t rc = llama_decode(ctx_.get(), batch_);
    ++n_forward_;
    if (rc != 0) {
        release_borrowed();
        if (rc == 1) {
            flush_queued();  // the prompt rows alone (they throw if even they do not fit)
            return decode_status::no_memory;
        }
        queued_.clear();
        throw std::runtime_error("llama_decode failed (code " + std::to_string(rc) + ")");
    }
    for (const auto & r : requests) {
        pending_[r.slot].clear();  // in the KV memory now; commit() may leave new ones
    }
    for (const auto & q : queued_) n_past_[q.slot] += (int32_t) q.tokens.size();
    queued_.clear();
    return decode_status::ok;
}

void llama_target::queue_prefill(std::int32_t slot, std::span<const token_id> tokens) {
    if (n_past_[slot] + (int32_t) tokens.size() > n_ctx_slot_) {
        throw user_error("the prompt (" + std::to_string(tokens.size()) + " more tokens) does not fit the context (" +
                         std::to_string(n_ctx_slot_) + " positions per slot)");
    }
    if (!tokens.empty()) queued_.push_back({slot, tokens});
}

int32_t llama_target::put_queued(int32_t row) {
    for (const auto & q : queued_) {
        for (size_t i = 0; i < q.tokens.size(); ++i, ++row) {
            batch_.token[row]     = q.tokens[i];
            batch_.pos[row]       = n_past_[q.slot] + (llama_pos) i;
            batch_.n_seq_id[row]  = 1;
            batch_.seq_id[row][0] = q.slot;
            batch_.logits[row]    = 0;
        }
    }
    return row;
}

void llama_target::flush_queued() {
    std::vector<queued_rows> q = std::move(queued_);
    queued_.clear();
    for (const auto & r : q) prefill(r.slot, r.tokens);
    use_threads(decode_threads_);
}

std::span<const float> llama_target::logits(std::int32_t request, std::int32_t node) const {
    const request_layout & lo = layout_[request];
    const int32_t row = lo.row0 + (node < 0 ? 0 : 1 + (lo.pos_of.empty() ? node : lo.pos_of[node]));
    const float * p = llama_get_logits_ith(ctx_.get(), row);
    return {p, (size_t) n_vocab_};
}

void llama_target::commit(std::int32_t request, std::span<const std::int32_t> path) {
    request_layout & lo = layout_[request];
    const llama_pos  p0 = n_past_[lo.slot];
    if (!trees_) {
        // The chain sits in the slot's sequence: keep the root and the accepted prefix, drop the rest.
        llama_memory_seq_rm(mem_, lo.slot, p0 + 1 + (llama_pos) path.size(), -1);
    } else {
        // Bit-exactness with plain decoding needs the slot's cells in position order with no holes among them
        // (attention sums over cells in cell order). Nodes sit in consecutive cells in row order, so the accepted
        // path keeps its cells only as far as it follows the first rows; the rest of it is dropped here and decoded
        // again, in place, at the head of the next batch (pending_).
        size_t m = 0;
        while (m < path.size() && lo.pos_of[path[m]] == (int32_t) m) ++m;
        if (m > 0) {
            // The borrowed id of a leaf below the last kept node tags exactly the kept path (plus deeper nodes at
            // higher positions, which the range excludes).
            const int32_t s = lo.leaf_seq[path[m - 1]];
            llama_memory_seq_cp(mem_, s, lo.slot, p0 + 1, p0 + 1 + (llama_pos) m);
        }
        std::vector<token_id> & pend = pending_[lo.slot];
        for (size_t j = m; j < path.size(); ++j) pend.push_back(lo.tokens[path[j]]);
    }
    for (int32_t s : lo.borrowed) {
        llama_memory_seq_rm(mem_, s, -1, -1);
    }
    lo.borrowed.clear();
    n_past_[lo.slot] = p0 + 1 + (int32_t) path.size();
}

void llama_target::release_borrowed() {
    for (auto & lo : layout_) {
        for (int32_t s : lo.borrowed) {
            llama_memory_seq_rm(mem_, s, -1, -1);
        }
        lo.borrowed.clear();
    }
}

void llama_target::undo_decode() {
    release_borrowed();
    for (auto & lo : layout_) {
        // Pending rows sat just below the root (n_past counts them), the tree above it.
        llama_memory_seq_rm(mem_, lo.slot, n_past_[lo.slot] - (llama_pos) lo.pending.size(), -1);
        pending_[lo.slot] = std::move(lo.pending);
    }
    layout_.clear();
}

std::int32_t llama_target::keep_prefix(std::int32_t slot, std::int32_t n) {
    // Pending tokens (tree layout) are committed but not in memory: keep only what is.
    const int32_t in_memory = n_past_[slot] - (int32_t) pending_[slot].size();
    const int32_t keep      = std::clamp(n, 0, in_memory);
    llama_memory_seq_rm(mem_, slot, keep, -1);
    n_past_[slot] = keep;
    pending_[slot].clear();
    return keep;
}

void llama_target::clear(std::int32_t slot) {
    llama_memory_seq_rm(mem_, slot, -1, -1);
    n_past_[slot] = 0;
    pending_[slot].clear();
}

}  // namespace rest
