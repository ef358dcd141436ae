#include "oai-response.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>

using json = nlohmann::json;

std::string new_response_id(api_kind kind) {
    static std::atomic<std::uint64_t> counter{0};
    static const std::uint64_t        salt = std::random_device{}() ^ (std::uint64_t) std::chrono::steady_clock::now()
                                                                          .time_since_epoch()
                                                                          .count();
    std::mt19937_64 rng(salt + counter.fetch_add(1));
    char            buf[40];
    std::snprintf(buf, sizeof(buf), "%016llx%08llx", (unsigned long long) rng(), (unsigned long long) (rng() >> 32));
    return std::string(kind == api_kind::chat ? "chatcmpl-" : "cmpl-") + buf;
}

json error_json(const api_error & e) {
    json err = {{"message", e.what()},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
    return json{{"error", err}};
}

json usage_json(const job_output & out) {
    // OpenAI's predicted-output counters: draft tokens from the prediction that verification accepted / rejected.
    const json details = {{"reasoning_tokens", 0},
                          {"accepted_prediction_tokens", out.stats.n_prediction_accepted},
                          {"rejected_prediction_tokens", out.stats.n_prediction_rejected}};
    return json{{"prompt_tokens", out.n_prompt},
                {"completion_tokens", out.n_completion},
                {"total_tokens", out.n_prompt + out.n_completion},
                {"prompt_tokens_details", {{"cached_tokens", out.stats.n_cached}}},
                {"completion_tokens_details", details}};
}

json rest_json(const job_output & out, bool return_tokens) {
    const auto & s      = out.stats;
    const double gen_us = s.t_total_us - s.t_prefill_us;
    json         j      = {
        {"tokens_per_forward", s.tokens_per_forward()},
        {"tokens_per_step", s.n_steps ? (double) s.n_tokens / (double) s.n_steps : 0.0},
        {"n_forward", s.n_forward},
        {"n_steps", s.n_steps},
        {"n_drafted", s.n_drafted},
        {"n_accepted", s.n_accepted},
        {"acceptance", s.n_drafted ? (double) s.n_accepted / (double) s.n_drafted : 0.0},
        {"tokens_per_second", gen_us > 0 ? (double) s.n_tokens * 1e6 / gen_us : 0.0},
        {"t_queue_ms", out.t_queue_ms},
        {"t_prefill_ms", s.t_prefill_us / 1000.0},
        {"t_draft_ms", s.t_draft_us / 1000.0},
        {"t_verify_ms", s.t_verify_us / 1000.0},
        {"t_total_ms", s.t_total_us / 1000.0},
        {"slot", out.slot},
    };
    if (return_tokens) {
        j["tokens"] = out.tokens;
    }
    return j;
}

namespace {

json bytes_of(const std::string & s) {
    json b = json::array();
    for (const unsigned char c : s) b.push_back((int) c);
    return b;
}

}  // namespace

json logprobs_json(api_kind kind, const std::vector<position_logprobs> & lps, std::size_t text_offset) {
    if (kind == api_kind::chat) {
        json content = json::array();
        for (const auto & p : lps) {
            json top = json::array();
            for (const auto & t : p.top) {
                top.push_back({{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes_of(t.piece)}});
            }
            content.push_back({{"token", p.chosen.piece},
                               {"logprob", p.chosen.logprob},
                               {"bytes", bytes_of(p.chosen.piece)},
                               {"top_logprobs", top}});
        }
        return json{{"content", content}};
    }
    json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
    std::size_t offset = text_offset;
    for (const auto & p : lps) {
        tokens.push_back(p.chosen.piece);
        values.push_back(p.chosen.logprob);
        // Alternatives by text, as OpenAI's legacy format; two tokens with the same text keep the likelier.
        json top = json::object();
        for (const auto & t : p.top) {
            if (!top.contains(t.piece)) top[t.piece] = t.logprob;
        }
        tops.push_back(top);
        offsets.push_back(offset);
        offset += p.chosen.piece.size();
    }
    return json{{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json completion_json(const response_meta & m, const std::string & text, const job_output & out) {
    json choice = {{"index", 0},
                   {"logprobs", m.logprobs >= 0 ? logprobs_json(m.kind, out.logprobs) : json(nullptr)},
                   {"finish_reason", out.finish_reason}};
    if (m.kind == api_kind::chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
        choice["text"] = text;
    }
    return json{{"id", m.id},
                {"object", m.kind == api_kind::chat ? "chat.completion" : "text_completion"},
                {"created", m.created},
                {"model", m.model},
                {"choices", json::array({choice})},
                {"usage", usage_json(out)},
                {"rest", rest_json(out, m.return_tokens)}};
}

json chunk_json(const response_meta & m, const std::string & text, const char * finish_reason, bool with_role,
                const json & logprobs) {
    json choice = {{"index", 0}, {"logprobs", logprobs},
                   {"finish_reason", finish_reason ? json(finish_reason) : json(nullptr)}};
    if (m.kind == api_kind::chat) {
        json delta = json::object();
        if (with_role) {
            delta["role"] = "assistant";
        }
        if (!text.empty() || with_role) {
            delta["content"] = text;
        }
        choice["delta"] = delta;
    } else {
        choice["text"] = text;
    }
    return json{{"id", m.id},
                {"object", m.kind == api_kind::chat ? "chat.completion.chunk" : "text_completion"},
                {"created", m.created},
                {"model", m.model},
                {"choices", json::array({choice})}};
}

json final_chunk_json(const response_meta & m, const job_output & out) {
    json j     = chunk_json(m, "", out.finish_reason.c_str());
    j["usage"] = usage_json(out);
    j["rest"]  = rest_json(out, m.return_tokens);
    return j;
}

json usage_chunk_json(const response_meta & m, const job_output & out) {
    json j       = chunk_json(m, "", nullptr);
    j["choices"] = json::array();
    j["usage"]   = usage_json(out);
    return j;
}

std::string dump_json(const json & j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json & j) {
    return "data: " + dump_json(j) + "\n\n";
}
