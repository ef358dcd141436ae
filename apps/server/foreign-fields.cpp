#include "foreign-fields.h"

#include "api-error.h"
#include "oai-request.h"

#include <array>
#include <string_view>

using json = nlohmann::json;

namespace {

bool any(const json &, const json &) { return true; }
bool is_false(const json & v, const json &) { return v.is_boolean() && !v.get<bool>(); }
bool is_zero(const json & v, const json &) { return v.is_number() && v.get<double>() == 0.0; }
bool at_most_zero(const json & v, const json &) { return v.is_number() && v.get<double>() <= 0.0; }
bool at_least_one(const json & v, const json &) { return v.is_number() && v.get<double>() >= 1.0; }
bool zero_or_one(const json & v, const json &) {
    return v.is_number() && (v.get<double>() == 0.0 || v.get<double>() == 1.0);
}
bool empty_value(const json & v, const json & = {}) {  // (json::empty() is false for every string)
    return v.is_string() ? v.get_ref<const std::string &>().empty() : (v.is_array() || v.is_object()) && v.empty();
}
bool never(const json &, const json &) { return false; }
bool is_true(const json & v, const json &) { return v.is_boolean() && v.get<bool>(); }
bool minus_one(const json & v, const json &) { return v.is_number() && v.get<double>() == -1.0; }
// llama-server's "none" returns a thinking model's text whole, as this server does; "auto" splits out the thinking
// only for templates that have it (the web UI sends it on every request), so it is taken as "none".
bool no_reasoning_split(const json & v, const json &) {
    return v == "none" || v == "auto";
}
// llama-server turns a json_schema, {} included, into a grammar, unless the request has a grammar of its own (the
// web UI sends both, the grammar empty).
bool schema_without_effect(const json & v, const json & body) {
    const auto g = body.find("grammar");
    return empty_value(v) && g != body.end() && empty_value(*g);
}
bool text_only(const json & v, const json &) { return v == json::array({"text"}); }
bool text_format(const json & v, const json &) { return v == json{{"type", "text"}} || (v.is_object() && v.empty()); }

// llama-server's sampler order, as letters ("edskypmxt", its default) or names. Of the samplers this server has
// (penalties, top-k, top-p, min-p, temperature), the order must be this server's, which is llama.cpp's default, and
// none may be left out; dry, top-n-sigma, typical-p and xtc are no-ops at the defaults their own fields are held to;
// infill and adaptive-p change the output whatever the fields say, so they are refused.
bool default_sampler_order(const json & v, const json &) {
    static constexpr std::array<std::string_view, 5> ours = {"penalties", "top_k", "top_p", "min_p", "temperature"};
    auto ours_of = [](std::string_view s) -> std::string_view {
        if (s == "e" || s == "penalties") return ours[0];
        if (s == "k" || s == "top_k") return ours[1];
        if (s == "p" || s == "top_p") return ours[2];
        if (s == "m" || s == "min_p") return ours[3];
        if (s == "t" || s == "temperature" || s == "temp") return ours[4];
        return {};
    };
    std::size_t n = 0;
    auto next = [&](std::string_view s) {
        if (s == "i" || s == "infill" || s == "a" || s == "adaptive_p") return false;
        const std::string_view o = ours_of(s);
        if (o.empty()) return true;  // llama.cpp ignores names it does not know
        return n < ours.size() && ours[n++] == o;
    };
    if (v.is_string()) {
        const std::string s = v.get<std::string>();
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (!next(std::string_view(s).substr(i, 1))) return false;
        }
    } else if (v.is_array()) {
        for (const json & e : v) {
            if (!e.is_string() || !next(e.get<std::string>())) return false;
        }
    } else {
        return false;
    }
    return n == ours.size();
}

struct foreign_field {
    const char * name;
    bool (*inert)(const json & v, const json & body);
    const char * ok;  // the values accepted, for the error message
    int          kinds;  // 1: completions, 2: chat, 3: both
};

constexpr int k_completion = 1, k_chat = 2, k_both = 3;

// Sorted by name within each group only for reading; looked up linearly (a request has a handful of fields).
constexpr foreign_field k_fields[] = {
    // OpenAI's: storage, routing and bookkeeping, which do not change the tokens.
    {"store", any, "", k_both},
    {"metadata", any, "", k_both},
    {"service_tier", any, "", k_both},
    {"prompt_cache_key", any, "", k_both},
    {"safety_identifier", any, "", k_both},
    {"reasoning_effort", never, "null", k_chat},  // llama-server passes it to the chat template
    {"verbosity", any, "", k_chat},
    {"modalities", text_only, "[\"text\"]", k_chat},
    {"audio", never, "null", k_chat},
    {"web_search_options", never, "null", k_chat},
    {"response_format", text_format, "{\"type\": \"text\"}", k_completion},  // chat's is parsed with the rest
    // llama-server's: scheduling, timing and response details.
    {"id_slot", any, "", k_both},
    {"timings_per_token", any, "", k_both},
    {"return_progress", any, "", k_both},
    {"post_sampling_probs", any, "", k_both},
    {"n_keep", any, "", k_both},  // what a context shift keeps; this server stops at the context's end instead
    {"sse_ping_interval", any, "", k_both},  // keep-alive comments on a silent stream: not tokens
    {"backend_sampling", is_false, "false", k_both},
    // llama.cpp's web UI: a thinking model's text and budget, which only templates with thinking tags act on.
    {"reasoning_format", no_reasoning_split, "\"none\" or \"auto\" (the text is returned whole)", k_chat},
    {"reasoning_control", any, "", k_chat},  // arms a budget sampler that ends thinking on request; no request here
    {"thinking_budget_tokens", minus_one, "-1", k_chat},
    {"reasoning_budget_tokens", minus_one, "-1", k_chat},
    {"continue_final_message", is_false, "false", k_chat},
    {"add_generation_prompt", is_true, "true", k_chat},
    // The web UI sends its typical-p setting as typ_p, a name llama-server does not read (it reads typical_p): the
    // same output as there, whatever the value.
    {"typ_p", any, "", k_both},
    // llama-server's samplers this server does not have, at the settings that switch them off ...
    {"typical_p", at_least_one, "1", k_both},
    {"mirostat", is_zero, "0", k_both},
    {"dry_multiplier", is_zero, "0", k_both},
    {"xtc_probability", is_zero, "0", k_both},
    {"top_n_sigma", at_most_zero, "-1", k_both},
    {"dynatemp_range", at_most_zero, "0", k_both},
    {"min_keep", zero_or_one, "0 or 1", k_both},
    {"samplers", default_sampler_order, "llama.cpp's default order (\"edskypmxt\")", k_both},
    // ... whose other parameters do nothing while they are off.
    {"mirostat_tau", any, "", k_both},
    {"mirostat_eta", any, "", k_both},
    {"dry_base", any, "", k_both},
    {"dry_allowed_length", any, "", k_both},
    {"dry_penalty_last_n", any, "", k_both},
    {"dry_sequence_breakers", any, "", k_both},
    {"xtc_threshold", any, "", k_both},
    {"dynatemp_exponent", any, "", k_both},
    // llama-server's constraints and output controls, when they ask for nothing.
    {"ignore_eos", is_false, "false", k_both},
    {"penalize_nl", is_false, "false", k_both},
    {"n_probs", is_zero, "0", k_both},
    {"n_indent", is_zero, "0", k_both},
    {"grammar", empty_value, "\"\"", k_both},
    {"json_schema", schema_without_effect, "{} beside an empty grammar", k_both},
    {"lora", empty_value, "[]", k_both},
    {"chat_template_kwargs", empty_value, "{}", k_chat},
};

int kind_bit(api_kind kind) { return kind == api_kind::chat ? k_chat : k_completion; }

const foreign_field * find_field(const std::string & key, api_kind kind) {
    for (const foreign_field & f : k_fields) {
        if (key == f.name && (f.kinds & kind_bit(kind))) return &f;
    }
    return nullptr;
}

}  // namespace

bool is_foreign_field(const std::string & key, api_kind kind) { return find_field(key, kind) != nullptr; }

void check_foreign_fields(const json & body, api_kind kind) {
    for (const auto & [k, v] : body.items()) {
        const foreign_field * f = find_field(k, kind);
        if (!f || v.is_null() || f->inert(v, body)) continue;  // null: not given, as OpenAI reads it
        throw bad_request("'" + k + "' is not supported with this value: this server accepts only " + f->ok +
                              " (its output would differ from what the request asks for)",
                          k, "unsupported_parameter");
    }
}
