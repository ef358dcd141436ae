#include "server-prompt.h"

#include "api-error.h"

std::string render_chat(const rest::chat_template & chat, std::span<const rest::chat_message> messages) {
    try {
        return chat.apply(messages);
    } catch (const rest::user_error & e) {
        throw bad_request(e.what(), "messages", "chat_template_error");
    }
}

job_input prepare_job(const completion_spec & spec, const rest::tokenizer & tok, const rest::chat_template & chat,
                      const prompt_limits & lim) {
    job_input in;
    if (spec.kind == api_kind::chat) {
        // Rendered chat text carries control tokens ("<|user|>") and no BOS: parse the former and add the latter,
        // as llama-server does.
        in.prompt = tok.tokenize(render_chat(chat, spec.messages), true, true);
    } else if (spec.has_prompt_tokens) {
        for (const rest::token_id t : spec.prompt_tokens) {
            if (t >= tok.n_vocab()) {
                throw bad_request("'prompt' token id " + std::to_string(t) + " is outside the vocabulary (" +
                                      std::to_string(tok.n_vocab()) + " tokens)",
                                  "prompt");
            }
        }
        in.prompt = spec.prompt_tokens;
    } else {
        in.prompt = tok.tokenize(spec.prompt_text, true, true);
    }
    const char *       param = spec.kind == api_kind::chat ? "messages" : "prompt";
    const std::int64_t n     = (std::int64_t) in.prompt.size();
    if (n == 0) {
        throw bad_request("the prompt is empty (no tokens)", param);
    }
    if (n >= lim.n_ctx_slot) {
        throw bad_request("This model's maximum context length is " + std::to_string(lim.n_ctx_slot) +
                              " tokens per slot. However, your prompt has " + std::to_string(n) + " tokens.",
                          param, "context_length_exceeded");
    }
    if (spec.max_tokens >= 0 && n + spec.max_tokens > lim.n_ctx_slot) {
        throw bad_request("This model's maximum context length is " + std::to_string(lim.n_ctx_slot) +
                              " tokens per slot. However, you requested " + std::to_string(n + spec.max_tokens) +
                              " tokens (" + std::to_string(n) + " in the prompt, " +
                              std::to_string(spec.max_tokens) + " for the completion).",
                          "max_tokens", "context_length_exceeded");
    }
    if (spec.has_prediction) {
        in.prediction = tok.tokenize(spec.prediction, false, false);
        // A prediction only drafts, so one longer than a slot is cut to it rather than refused (OpenAI takes any; an
        // edited one runs longer than the output it predicts). What is cut could still have drafted where the output
        // skips ahead in it: drafts lost, never output changed.
        if ((std::int64_t) in.prediction.size() > lim.n_ctx_slot) in.prediction.resize((std::size_t) lim.n_ctx_slot);
    }
    in.n_predict   = spec.max_tokens >= 0 ? spec.max_tokens : lim.n_predict_default;
    in.sampling    = spec.sampling;
    in.stop        = spec.stop;
    in.speculate   = spec.speculate;
    in.cache_prompt = spec.cache_prompt;
    in.n_draft_max = spec.draft_max;  // the engine caps it by the server's
    in.n_logprobs  = spec.logprobs;
    in.corpora     = spec.corpora;
    return in;
}
