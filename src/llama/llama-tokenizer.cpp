#include "llama-tokenizer.h"

#include "llama-util.h"
#include "rest/llama-model.h"

#include <xxhash.h>

#include <climits>
#include <cstring>
#include <stdexcept>

namespace rest {

namespace {

const char * vocab_type_name(enum llama_vocab_type t) {
    switch (t) {
        case LLAMA_VOCAB_TYPE_SPM:  return "spm";
        case LLAMA_VOCAB_TYPE_BPE:  return "bpe";
        case LLAMA_VOCAB_TYPE_WPM:  return "wpm";
        case LLAMA_VOCAB_TYPE_UGM:  return "ugm";
        case LLAMA_VOCAB_TYPE_RWKV: return "rwkv";
        default:                    return "other";
    }
}

}  // namespace

llama_tokenizer::llama_tokenizer(const llama_model * model, llama_model_ptr owned) :
    owned_(std::move(owned)), model_(model), vocab_(llama_model_get_vocab(model)) {
    // The fingerprint covers the tokenizer type and every token's text: two models that tokenize alike share it.
    XXH3_state_t * st = XXH3_createState();
    XXH3_64bits_reset(st);
    const int32_t          n    = llama_vocab_n_tokens(vocab_);
    const enum llama_vocab_type type = llama_vocab_type(vocab_);
    XXH3_64bits_update(st, &type, sizeof(type));
    XXH3_64bits_update(st, &n, sizeof(n));
    for (int32_t i = 0; i < n; ++i) {
        const char * text = llama_vocab_get_text(vocab_, i);
        XXH3_64bits_update(st, text, std::strlen(text) + 1);
    }
    fingerprint_ = XXH3_64bits_digest(st);
    XXH3_freeState(st);

    char pre[128] = {};
    llama_model_meta_val_str(model_, "tokenizer.ggml.pre", pre, sizeof(pre));
    description_ = std::string(vocab_type_name(type)) + (pre[0] ? std::string("/") + pre : "") + ", " +
                   std::to_string(n) + " tokens";
}

std::vector<token_id> llama_tokenizer::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    if (text.size() > INT32_MAX / 2) {
        throw user_error("text of " + std::to_string(text.size()) + " bytes is too long to tokenize at once");
    }
    std::vector<token_id> out(text.size() + 8);
    try {
        int32_t n = llama_tokenize(vocab_, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(),
                                   add_special, parse_special);
        if (n < 0) {  // llama_tokenize returns the negated size it needs
            out.resize(-n);
            n = llama_tokenize(vocab_, text.data(), (int32_t) text.size(), out.data(), (int32_t) out.size(),
                               add_special, parse_special);
        }
        out.resize(n < 0 ? 0 : n);
    } catch (const std::out_of_range & e) {
        // llama.cpp's tokenizers look tokens up with .at(): a vocabulary without the byte tokens its type needs
        // (a corrupt file) throws from inside.
        throw user_error(std::string("the model's vocabulary cannot tokenize this text (") + e.what() +
                         "): its tokenizer data is corrupt or incomplete");
    }
    return out;
}

std::string llama_tokenizer::detokenize(std::span<const token_id> tokens) const {
    std::string out(tokens.size() * 8 + 16, '\0');
    int32_t n = llama_detokenize(vocab_, tokens.data(), (int32_t) tokens.size(), out.data(), (int32_t) out.size(),
                                 false, false);
    if (n < 0) {
        out.resize(-n);
        n = llama_detokenize(vocab_, tokens.data(), (int32_t) tokens.size(), out.data(), (int32_t) out.size(), false,
                             false);
    }
    out.resize(n < 0 ? 0 : n);
    return out;
}

std::string llama_tokenizer::piece(token_id t) const {
    char    buf[256];
    int32_t n = llama_token_to_piece(vocab_, t, buf, sizeof(buf), 0, true);
    if (n < 0) {
        std::string big(-n, '\0');
        n = llama_token_to_piece(vocab_, t, big.data(), (int32_t) big.size(), 0, true);
        big.resize(n < 0 ? 0 : n);
        return big;
    }
    return std::string(buf, n);
}

int32_t llama_tokenizer::n_vocab() const {
    return llama_vocab_n_tokens(vocab_);
}

std::string llama_tokenizer::apply_chat_template(std::span<const chat_message> messages, bool add_assistant) const {
    const char * tmpl = llama_model_chat_template(model_, nullptr);
    if (!tmpl) {
        throw user_error("the model has no chat template (tokenizer.chat_template is missing)");
    }
    std::vector<llama_chat_message> msgs;
    msgs.reserve(messages.size());
    size_t total = 0;
    for (const auto & m : messages) {
        msgs.push_back({m.role.c_str(), m.content.c_str()});
        total += m.role.size() + m.content.size();
    }
    std::string out(total * 2 + 256, '\0');
    int32_t n = llama_chat_apply_template(tmpl, msgs.data(), msgs.size(), add_assistant, out.data(), (int32_t) out.size());
    if (n > (int32_t) out.size()) {
        out.resize(n);
        n = llama_chat_apply_template(tmpl, msgs.data(), msgs.size(), add_assistant, out.data(), (int32_t) out.size());
    }
    if (n < 0) {
        throw user_error("the model's chat template is not one llama.cpp's llama_chat_apply_template supports");
    }
    out.resize(n);
    return out;
}

std::unique_ptr<tokenizer> load_tokenizer(const std::string & model_path) {
    llama_ensure_backend();
    llama_check_gguf_file(model_path);
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model_ptr model(llama_model_load_from_file(model_path.c_str(), mp));
    if (!model) {
        throw user_error("cannot load the vocabulary of '" + model_path + "': " + llama_last_error());
    }
    const llama_model * raw = model.get();
    return std::make_unique<llama_tokenizer>(raw, std::move(model));
}

tokenizer_identity identity_of(const tokenizer & tok) {
    return {tok.fingerprint(), tok.description(), tok.n_vocab()};
}

}  // namespace rest
