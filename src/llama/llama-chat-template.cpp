#include "llama-chat-template.h"

#include "chat.h"  // llama.cpp's common/chat.h
#include "rest/types.h"

#include <algorithm>

namespace rest {

namespace {

// common_chat_templates_init logs a template's parse error and rethrows it sliced to std::exception, which loses the
// message (and our logging is quiet): parse the Jinja source once here first, to keep it.
void check_jinja_parses(const std::string & src) {
    try {
        common_chat_template probe(src, "", "");
    } catch (const std::exception & e) {
        throw user_error(std::string("the chat template does not parse: ") + e.what());
    }
}

class llama_chat_template final : public chat_template {
  public:
    llama_chat_template(const llama_model * model, const chat_template_params & params) {
        if (!params.name.empty() && !params.source.empty()) {
            throw user_error("give a chat template name or a template source, not both");
        }
        std::string override_src;
        if (!params.name.empty()) {
            const auto names = chat_template_builtin_names();
            if (std::find(names.begin(), names.end(), params.name) == names.end()) {
                std::string list;
                for (const auto & n : names) list += (list.empty() ? "" : ", ") + n;
                throw user_error("chat template '" + params.name + "' is not one of llama.cpp's built-in names (" + list +
                                 "), nor Jinja source");
            }
            override_src = params.name;
            // llama-server renders "chatml" through Jinja (common_chat_templates_init substitutes its ChatML source);
            // any other name is meaningful only to the built-in renderer (llama-server --no-jinja).
            use_jinja_ = params.name == "chatml";
        } else {
            override_src = params.source;
        }
        if (use_jinja_ && override_src != "chatml") {
            const char * own = override_src.empty() ? llama_model_chat_template(model, nullptr) : nullptr;
            if (!override_src.empty() || own) {
                check_jinja_parses(override_src.empty() ? std::string(own) : override_src);
            }
        }
        try {
            tmpls_ = common_chat_templates_init(model, override_src);
            // llama-server's default --reasoning auto: thinking on wherever the template can switch it. Finding out
            // renders the template on sample messages, so a template that cannot render fails here, at start-up.
            enable_thinking_ = use_jinja_ && common_chat_templates_support_enable_thinking(tmpls_.get());
        } catch (const std::exception & e) {
            throw user_error(std::string("the chat template does not work: ") + e.what());
        }
        fallback_ = !common_chat_templates_was_explicit(tmpls_.get());
        if (fallback_) {
            description_ = "ChatML (fallback: the model has no chat template)";
        } else if (!params.name.empty()) {
            description_ = "built-in " + params.name;
        } else if (!params.source.empty()) {
            description_ = "Jinja given on the command line";
        } else {
            description_ = "the model's own (Jinja)";
        }
    }

    std::string apply(std::span<const chat_message> messages) const override {
        common_chat_templates_inputs in;
        for (const auto & m : messages) {
            common_chat_msg msg;
            msg.role    = m.role;
            msg.content = m.content;
            in.messages.push_back(std::move(msg));
        }
        in.use_jinja             = use_jinja_;
        in.add_generation_prompt = true;
        in.reasoning_format      = COMMON_REASONING_FORMAT_DEEPSEEK;  // llama-server's default; the prompt ignores it
        in.enable_thinking       = enable_thinking_;
        in.chat_template_kwargs["preserve_reasoning"] = "true";      // llama-server's default (common/arg.cpp)
        // llama-server's prefill_assistant (on by default): a trailing assistant message is continued.
        const size_t n = messages.size();
        if (n > 0 && messages[n - 1].role == "assistant") {
            if (n >= 2 && messages[n - 2].role == "assistant") {
                throw user_error("Cannot have 2 or more assistant messages at the end of the list.");
            }
            in.continue_final_message = COMMON_CHAT_CONTINUATION_AUTO;
            in.add_generation_prompt  = false;
        }
        try {
            // No lock: each call renders in its own Jinja context, and llama-server calls this concurrently from its
            // HTTP threads on one shared template set too. (A render takes milliseconds: it also derives the
            // response parser, which a lock would serialize across every chat request.)
            return common_chat_templates_apply(tmpls_.get(), in).prompt;
        } catch (const std::exception & e) {
            throw user_error(std::string("the chat template cannot render these messages: ") + e.what());
        }
    }

    bool is_fallback() const override { return fallback_; }
    std::string description() const override { return description_; }

  private:
    common_chat_templates_ptr tmpls_;
    bool                      use_jinja_       = true;
    bool                      enable_thinking_ = false;
    bool                      fallback_        = false;
    std::string               description_;
};

}  // namespace

std::unique_ptr<chat_template> make_llama_chat_template(const llama_model * model, const chat_template_params & params) {
    return std::make_unique<llama_chat_template>(model, params);
}

std::vector<std::string> chat_template_builtin_names() {
    const int32_t              n = llama_chat_builtin_templates(nullptr, 0);
    std::vector<const char *>  names((size_t) std::max(n, 0));
    llama_chat_builtin_templates(names.data(), names.size());
    return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace rest
