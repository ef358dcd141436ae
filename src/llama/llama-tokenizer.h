// rest::tokenizer over a llama_vocab. Owns the model only when it loaded one itself (vocab-only).
#pragma once

#include "llama-cpp.h"
#include "rest/tokenizer.h"

namespace rest {

class llama_tokenizer final : public tokenizer {
  public:
    // Borrows `model` (which must outlive this object), or owns it when `owned` is set.
    llama_tokenizer(const llama_model * model, llama_model_ptr owned = nullptr);

    std::vector<token_id> tokenize(std::string_view text, bool add_special, bool parse_special) const override;
    std::string detokenize(std::span<const token_id> tokens) const override;
    std::string piece(token_id t) const override;
    int32_t n_vocab() const override;
    std::uint64_t fingerprint() const override { return fingerprint_; }
    std::string description() const override { return description_; }
    std::string apply_chat_template(std::span<const chat_message> messages, bool add_assistant) const override;

  private:
    llama_model_ptr     owned_;
    const llama_model * model_;
    const llama_vocab * vocab_;
    std::uint64_t       fingerprint_ = 0;
    std::string         description_;
};

}  // namespace rest
