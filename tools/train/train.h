// rest-train: the recipe's C++ half. Makes the demo model from scratch: an SPM vocabulary GGUF from a sentencepiece
// model, a random-init LLaMA GGUF with that vocabulary, then trains it with llama.cpp's optimizer (llama_opt_*).
// This tool is not part of the engine: it links llama.cpp directly because the adapter has no training API.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

struct ggml_tensor;
struct llama_vocab;

namespace rest::train {

// sentencepiece stands in for newlines with this character while learning pieces (it reads one sentence per line),
// so pieces like "\n        " (newline + indent) can be learned; the vocabulary GGUF maps it back to '\n'.
inline constexpr const char * k_newline_stand_in = "\xe2\x8f\x8e";  // U+23CE RETURN SYMBOL

// Writes a GGUF holding only llama.cpp SPM tokenizer keys, read from a sentencepiece .model file.
void write_spm_vocab(const std::string & spm_model, const std::string & out_path);

struct train_params {
    std::string   model;              // f32 GGUF to start from (a fixture or a checkpoint)
    std::string   out;                // trained f32 GGUF, rewritten at every checkpoint
    std::string   train_files;        // text file listing training sources, one path a line
    std::string   heldout_files;      // same, for held-out evaluation (may be empty)
    std::string   log_path;           // TSV: step, tokens, seconds, lr, train loss, held-out loss
    std::int32_t  n_ctx        = 256;     // tokens per sequence = tokens per optimizer step
    std::int32_t  n_threads    = 2;
    std::int64_t  steps        = 6000;    // optimizer steps (the cosine schedule spans exactly these)
    std::int64_t  warmup       = 200;     // linear warm-up steps
    float         lr           = 1e-3f;   // peak AdamW learning rate
    float         lr_min       = 1e-4f;   // end of the cosine decay
    float         wd           = 0.0f;    // AdamW weight decay
    float         beta2        = 0.99f;   // AdamW second-moment decay: 0.99 reacts faster to rare large gradients
    std::int64_t  eval_every   = 250;     // steps between held-out evaluations and checkpoints
    std::int32_t  eval_seqs    = 64;      // held-out sequences per periodic evaluation (the final one uses all)
    double        max_minutes  = 0.0;     // stop early (and checkpoint) after this wall time; 0 = no limit
    std::uint32_t seed         = 42;      // sequence sampling
};

void train_model(const train_params & params);

// Rewrites a GGUF (atomically, in == out allowed) after edit() has seen each f32 tensor's name and data.
void edit_f32_tensors(const std::string & in, const std::string & out,
                      const std::function<void(const std::string &, ggml_tensor *)> & edit);

// Multiplies one f32 tensor of a GGUF in place (atomically rewritten).
void rescale_tensor(const std::string & path, const std::string & name, float scale);

// The lines of a file list (one path a line).
std::vector<std::string> read_list(const std::string & path);

// Each listed file as BOS + its tokens + EOS, concatenated; n_bytes receives the files' total size.
std::vector<std::int32_t> tokenize_files(const llama_vocab * vocab, const std::string & list, std::size_t & n_bytes);

// The PyTorch route (tools/train/train-torch.py): the corpus as u16 token ids for it, its weights back into a GGUF,
// and the trained GGUF's held-out loss as llama.cpp computes it (which checks the conversion end to end).
void export_tokens(const std::string & model, const std::string & files, const std::string & out);
void import_weights(const std::string & model, const std::string & dir, const std::string & out);
double heldout_loss(const std::string & model, const std::string & files, std::int32_t n_ctx, std::int32_t n_threads);

// llama.cpp logs only warnings and errors from here on.
void quiet_logs();

// Tokenizes and detokenizes every listed file; throws when any does not round-trip. Prints bytes per token.
void check_tokenizer(const std::string & model, const std::string & files);

// Copies `in` to `out` as `type` (f16, q8_0, f32) with general.name set.
void quantize_model(const std::string & in, const std::string & out, const std::string & type, const std::string & name);

}  // namespace rest::train
