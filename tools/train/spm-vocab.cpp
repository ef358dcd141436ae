#include "train.h"

#include "rest/types.h"

#include "gguf.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <filesystem>
#include <vector>

namespace rest::train {

namespace {

// llama.cpp's llama_token_attr / token types as stored in tokenizer.ggml.token_type.
enum : std::int32_t { k_normal = 1, k_unknown = 2, k_control = 3, k_user_defined = 4, k_unused = 5, k_byte = 6 };

std::string replace_all(std::string s, const std::string & from, const std::string & to) {
    for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
        s.replace(pos, from.size(), to);
    }
    return s;
}

}  // namespace

void write_spm_vocab(const std::string & spm_model, const std::string & out_path) {
    sentencepiece::SentencePieceProcessor sp;
    const auto status = sp.Load(spm_model);
    if (!status.ok()) {
        throw user_error("vocab: cannot load sentencepiece model '" + spm_model + "': " + status.ToString());
    }
    const int n = sp.GetPieceSize();
    std::vector<std::string> pieces(n);
    std::vector<const char *> ptrs(n);
    std::vector<float>        scores(n);
    std::vector<std::int32_t> types(n);
    for (int i = 0; i < n; ++i) {
        // Byte pieces stay "<0x0A>" etc.: llama.cpp's byte_to_token looks them up by that text.
        pieces[i] = sp.IsByte(i) ? sp.IdToPiece(i) : replace_all(sp.IdToPiece(i), k_newline_stand_in, "\n");
        scores[i] = sp.GetScore(i);
        types[i]  = sp.IsUnknown(i) ? k_unknown : sp.IsControl(i) ? k_control : sp.IsByte(i) ? k_byte
                  : sp.IsUnused(i) ? k_unused : k_normal;
    }
    for (int i = 0; i < n; ++i) {
        ptrs[i] = pieces[i].c_str();
    }
    if (sp.bos_id() < 0 || sp.eos_id() < 0 || sp.unk_id() < 0) {
        throw user_error("vocab: '" + spm_model + "' needs <unk>, <s> and </s> pieces");
    }
    gguf_context * g = gguf_init_empty();
    gguf_set_val_str(g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(g, "tokenizer.ggml.tokens", ptrs.data(), n);
    gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores.data(), n);
    gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types.data(), n);
    gguf_set_val_u32(g, "tokenizer.ggml.bos_token_id", (std::uint32_t) sp.bos_id());
    gguf_set_val_u32(g, "tokenizer.ggml.eos_token_id", (std::uint32_t) sp.eos_id());
    gguf_set_val_u32(g, "tokenizer.ggml.unknown_token_id", (std::uint32_t) sp.unk_id());
    gguf_set_val_bool(g, "tokenizer.ggml.add_bos_token", true);
    gguf_set_val_bool(g, "tokenizer.ggml.add_eos_token", false);
    // Code: no dummy "▁" before the first piece (the sentencepiece model is trained with --add_dummy_prefix=false).
    gguf_set_val_bool(g, "tokenizer.ggml.add_space_prefix", false);
    const std::string tmp = out_path + ".tmp";
    const bool ok = gguf_write_to_file(g, tmp.c_str(), false);
    gguf_free(g);
    if (!ok) {
        std::remove(tmp.c_str());
        throw user_error("vocab: cannot write '" + tmp + "'");
    }
    std::filesystem::rename(tmp, out_path);
}

}  // namespace rest::train
