// The llama.cpp adapter's public face. Nothing here exposes llama.h: a loaded model hands out the core's
// interfaces (tokenizer, target_model, token_sampler).
#pragma once

#include "rest/chat-template.h"
#include "rest/index-builder.h"
#include "rest/sampler.h"
#include "rest/target-model.h"
#include "rest/tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>

namespace rest {

// Loads only the vocabulary of a GGUF model (fast, no weights). Throws user_error for a missing or bad file.
std::unique_ptr<tokenizer> load_tokenizer(const std::string & model_path);

tokenizer_identity identity_of(const tokenizer & tok);

struct context_params {
    std::int32_t n_ctx     = 0;    // total positions over all slots; 0: the model's training context, capped at 4096
    std::int32_t n_slots   = 1;    // concurrent sequences
    std::int32_t n_batch   = 512;  // most tokens per llama_decode call
    std::int32_t n_threads = 0;    // 0: all hardware threads
    // Sequence ids lent to draft leaves per forward pass (one per leaf, over all slots). llama.cpp's batch checks
    // cost O(n_seq_max^2) per decode, so the pool is sized to what trees need rather than the maximum of 256.
    std::int32_t n_leaves_max = 32;
    // true: one unified KV pool where draft leaves borrow sequence ids (tree verification). false: llama.cpp's
    // default one-sequence-per-slot layout, which verifies chains only (target_model::trees() is false) but skips
    // llama.cpp's per-decode batch checks over all 256 sequence ids (~0.1 ms: a third of a tiny model's step).
    bool         trees = true;
    // Trees with several slots: one llama.cpp context per slot instead of one pool shared by all. Every slot then
    // computes what it would alone, bit-exact with plain decoding wherever one slot is (a shared pool interleaves
    // slots' cells, see src/llama/per-slot-target.h), at one forward pass per slot per step. Ignored for chains, whose
    // slots never share a pool.
    bool         context_per_slot = false;
    // Whether a context with these settings is one llama.cpp context per slot (context_per_slot applies).
    bool per_slot_contexts() const { return trees && context_per_slot && n_slots > 1; }
    // Flash attention: -1 auto (on GPUs llama.cpp decides; on CPUs on for quantized weights, where it makes batched
    // rows bit-identical to single ones, off for F32/F16, where it is slow; see llama-context.cpp), 0 off, 1 on.
    std::int32_t flash_attn = -1;
    // KV cache types (llama.cpp's -ctk / -ctv): f16 (default), f32, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl.
    // On CPUs with flash attention, a quantized or bf16 cache makes every row take the same kernel (llama.cpp splits
    // an f16 cache over threads for single-row decodes past 512 cells), so outputs stay bit-exact at any length.
    std::string cache_type_k = "f16";
    std::string cache_type_v = "f16";
};

struct model_info {
    std::string   path;
    std::string   description;  // llama_model_desc, e.g. "llama 1B Q8_0"
    std::uint64_t n_params = 0;
    std::uint64_t size_bytes = 0;
    std::int32_t  n_layer = 0;
    std::int32_t  n_embd = 0;
    std::int32_t  n_head = 0;
    std::int32_t  n_head_kv = 0;
    std::int32_t  n_ctx_train = 0;
    std::int32_t  n_vocab = 0;
    std::string   file_type;    // e.g. "Q8_0", "F32" (from general.file_type)
    std::string   backend;      // where layers run: "CPU", or devices and -ngl, e.g. "CUDA0/ngl99", "RPC0[h:p]+RPC1[h:p]/ngl99"
};

class model {
  public:
    virtual ~model() = default;

    // Throws user_error (one line) for a missing, truncated or non-GGUF file. rpc_servers ("HOST:PORT,...", llama.cpp's
    // --rpc) adds those rpc-server processes as devices first, so that n_gpu_layers spreads layers over them;
    // user_error for a malformed list or a server that cannot be reached.
    static std::unique_ptr<model> load(const std::string & path, std::int32_t n_gpu_layers = 0,
                                       const std::string & rpc_servers = "");

    virtual const model_info & info() const = 0;
    virtual const tokenizer & vocab() const = 0;
    virtual bool is_eog(token_id t) const = 0;
    // A context with its own KV memory. The model must outlive it.
    virtual std::unique_ptr<target_model> new_context(const context_params & params) const = 0;
    // llama.cpp's sampler chain (penalties, top-k, top-p, min-p, temperature, dist) or an argmax when greedy.
    virtual std::unique_ptr<token_sampler> new_sampler(const sampler_params & params) const = 0;
    // The chat renderer for this model (rest/chat-template.h). The model must outlive it. Throws user_error for an
    // unknown built-in name or a template llama.cpp cannot parse (the model's own included).
    virtual std::unique_ptr<chat_template> new_chat_template(const chat_template_params & params) const = 0;
};

// Whether a --draft-layout ("auto", "tree" or "chain"; user_error otherwise) verifies trees. Auto starts with
// chains; the front end switches to trees where the measured verify cost is flat (apps/cost-cache.h says why).
bool layout_uses_trees(const std::string & layout);

// Silences llama.cpp's own logging unless REST_LLAMA_LOG=1 (libllama's errors still print; common's errors reach
// the user as exceptions).
void llama_log_quiet();

// llama.cpp ends the process on a failed internal check (GGML_ASSERT, GGML_ABORT), which values of a corrupt model
// file reach (a NaN epsilon, an expert count without a used-expert count, an integer weight tensor). Once the
// backend is initialised, rest reports that as one line on stderr and exits with status 1 instead of a core dump
// and a debugger's backtrace on stdout (REST_LLAMA_LOG=1 keeps llama.cpp's own report and backtrace). `cleanup` runs
// first (nullptr: none): async-signal-safe work only, such as unlinking a temp file; the last one set runs.
void set_llama_stop_cleanup(void (*cleanup)());

}  // namespace rest
