#include "oai-request.h"

#include "api-error.h"
#include "foreign-fields.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <set>

using json = nlohmann::json;

namespace {

const char * type_name(const json & v) {
    switch (v.type()) {
        case json::value_t::null:            return "null";
        case json::value_t::boolean:         return "boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned: return "integer";
        case json::value_t::number_float:    return "number";
        case json::value_t::string:          return "string";
        case json::value_t::array:           return "array";
        case json::value_t::object:          return "object";
        default:                             return "value";
    }
}

[[noreturn]] void wrong_type(const std::string & field, const char * expected, const json & v) {
    throw bad_request("'" + field + "' must be " + expected + ", got " + type_name(v), field);
}

// The field's value, or nullptr when absent or null (OpenAI treats null as "not given").
const json * find(const json & body, const char * key) {
    const auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json & body, const char * key, bool def) {
    const json * v = find(body, key);
    if (!v) {
        return def;
    }
    if (!v->is_boolean()) {
        wrong_type(key, "a boolean", *v);
    }
    return v->get<bool>();
}

// Integers only (1.0 is not an integer, as OpenAI's schema says).
std::int64_t get_int(const json & body, const char * key, std::int64_t def, std::int64_t lo, std::int64_t hi) {
    const json * v = find(body, key);
    if (!v) {
        return def;
    }
    if (!v->is_number_integer()) {
        wrong_type(key, "an integer", *v);
    }
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > (std::uint64_t) std::numeric_limits<std::int64_t>::max()) {
        throw bad_request("'" + std::string(key) + "' is out of range", key);
    }
    const std::int64_t x = v->get<std::int64_t>();
    if (x < lo || x > hi) {
        throw bad_request("'" + std::string(key) + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + std::to_string(x),
                          key);
    }
    return x;
}

double get_number(const json & body, const char * key, double def, double lo, double hi) {
    const json * v = find(body, key);
    if (!v) {
        return def;
    }
    if (!v->is_number()) {
        wrong_type(key, "a number", *v);
    }
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
        throw bad_request("'" + std::string(key) + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() +
                              "], got " + v->dump(),
                          key);
    }
    return x;
}

// Fields this server accepts but cannot honour: only their no-op values pass (null, false, 0, "", [], {} or ok).
void require_default(const json & body, const char * key, const json & ok, const char * why) {
    const json * v = find(body, key);
    if (!v || *v == ok || (v->is_boolean() && !v->get<bool>()) || (v->is_number() && v->get<double>() == 0.0) ||
        (v->is_string() && v->get<std::string>().empty()) || ((v->is_array() || v->is_object()) && v->empty())) {
        return;
    }
    throw bad_request("'" + std::string(key) + "' is not supported: " + why, key, "unsupported_parameter");
}

// `corpus`: a name or a non-empty list of names (SGLang's open request; rest's extension).
std::vector<std::string> get_corpus(const json & body) {
    const json * v = find(body, "corpus");
    if (!v) return {};
    std::vector<std::string> out;
    if (v->is_string()) {
        out.push_back(v->get<std::string>());
    } else if (v->is_array() && !v->empty() && v->size() <= 64) {
        for (const auto & s : *v) {
            if (!s.is_string()) wrong_type("corpus", "a corpus name or a list of names", s);
            out.push_back(s.get<std::string>());
        }
    } else {
        wrong_type("corpus", "a corpus name or a non-empty list of at most 64 names", *v);
    }
    return out;
}

std::vector<std::string> get_stop(const json & body) {
    const json * v = find(body, "stop");
    std::vector<std::string> out;
    if (!v) {
        return out;
    }
    if (v->is_string()) {
        out.push_back(v->get<std::string>());
    } else if (v->is_array()) {
        if (v->size() > 16) {
            throw bad_request("'stop' has " + std::to_string(v->size()) + " entries, at most 16 are allowed", "stop");
        }
        for (const auto & s : *v) {
            if (!s.is_string()) {
                wrong_type("stop", "a string or an array of strings", s);
            }
            out.push_back(s.get<std::string>());
        }
    } else {
        wrong_type("stop", "a string or an array of strings", *v);
    }
    for (const auto & s : out) {
        if (s.empty()) {
            throw bad_request("'stop' strings must not be empty", "stop");
        }
    }
    return out;
}

void parse_prompt(const json & body, completion_spec & spec) {
    const json * v = find(body, "prompt");
    if (!v) {
        throw bad_request("'prompt' is required", "prompt");
    }
    auto token_list = [&](const json & arr) {
        std::vector<rest::token_id> toks;
        for (const auto & t : arr) {
            if (!t.is_number_integer() || t.get<std::int64_t>() < 0 ||
                t.get<std::int64_t>() > std::numeric_limits<rest::token_id>::max()) {
                throw bad_request("'prompt' token ids must be non-negative integers", "prompt");
            }
            toks.push_back((rest::token_id) t.get<std::int64_t>());
        }
        return toks;
    };
    if (v->is_string()) {
        spec.prompt_text = v->get<std::string>();
    } else if (v->is_array()) {
        if (v->empty()) {
            throw bad_request("'prompt' must not be empty", "prompt");
        }
        const json & first = v->front();
        if (first.is_string() || first.is_array()) {
            if (v->size() != 1) {
                throw bad_request("'prompt' holds " + std::to_string(v->size()) +
                                      " prompts; this server takes one prompt per request",
                                  "prompt");
            }
            if (first.is_string()) {
                spec.prompt_text = first.get<std::string>();
            } else {
                spec.prompt_tokens     = token_list(first);
                spec.has_prompt_tokens = true;
            }
        } else {
            spec.prompt_tokens     = token_list(*v);
            spec.has_prompt_tokens = true;
        }
        if (spec.has_prompt_tokens && spec.prompt_tokens.empty()) {
            throw bad_request("'prompt' must not be empty", "prompt");
        }
    } else {
        wrong_type("prompt", "a string, an array of token ids, or an array with one string", *v);
    }
}

// OpenAI's content: a string, or an array of text parts (their texts joined).
std::string text_content(const json & v, const std::string & field) {
    if (v.is_string()) {
        return v.get<std::string>();
    }
    if (!v.is_array()) {
        wrong_type(field, "a string or an array of content parts", v);
    }
    std::string text;
    for (const auto & part : v) {
        if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
            throw bad_request("'" + field + "' parts must be {\"type\": \"text\", \"text\": string}; other part types "
                              "are not supported", field);
        }
        text += part["text"].get<std::string>();
    }
    return text;
}

std::string message_content(const json & msg, const std::string & role, size_t i) {
    const auto it = msg.find("content");
    if (it == msg.end() || it->is_null()) {
        // Only an assistant's message may go without (OpenAI's: one that made tool calls); a user's or system's
        // without content is a malformed request, which OpenAI and llama-server refuse.
        if (role != "assistant") {
            throw bad_request("'messages[" + std::to_string(i) + "].content' is required for a " + role + " message",
                              "messages[" + std::to_string(i) + "].content");
        }
        return "";
    }
    return text_content(*it, "messages[" + std::to_string(i) + "].content");
}

// OpenAI's predicted outputs: {"type": "content", "content": string or text parts}.
void parse_prediction(const json & body, completion_spec & spec) {
    const json * v = find(body, "prediction");
    if (!v || v->is_null()) {
        return;
    }
    if (!v->is_object()) {
        wrong_type("prediction", "an object {\"type\": \"content\", \"content\": ...}", *v);
    }
    for (const auto & [k, _] : v->items()) {
        if (k != "type" && k != "content") {
            throw bad_request("Unrecognized request argument supplied: prediction." + k, "prediction." + k,
                              "unrecognized_argument");
        }
    }
    const auto type = v->find("type");
    if (type == v->end() || *type != "content") {
        throw bad_request("'prediction.type' must be \"content\"", "prediction.type");
    }
    const auto content = v->find("content");
    if (content == v->end()) {
        throw bad_request("'prediction.content' is required", "prediction.content");
    }
    spec.prediction     = text_content(*content, "prediction.content");
    spec.has_prediction = true;
}

void parse_messages(const json & body, completion_spec & spec) {
    const json * v = find(body, "messages");
    if (!v) {
        throw bad_request("'messages' is required", "messages");
    }
    if (!v->is_array()) {
        wrong_type("messages", "an array", *v);
    }
    if (v->empty()) {
        throw bad_request("'messages' must hold at least one message", "messages");
    }
    static const std::set<std::string> roles = {"system", "developer", "user", "assistant"};
    static const std::set<std::string> keys  = {"role", "content", "name"};
    for (size_t i = 0; i < v->size(); ++i) {
        const json &      msg    = (*v)[i];
        const std::string prefix = "messages[" + std::to_string(i) + "]";
        if (!msg.is_object()) {
            wrong_type(prefix, "an object", msg);
        }
        for (const auto & [k, _] : msg.items()) {
            if (!keys.count(k)) {
                throw bad_request("'" + prefix + "." + k + "' is not supported", prefix + "." + k,
                                  "unsupported_parameter");
            }
        }
        const auto role = msg.find("role");
        if (role == msg.end() || !role->is_string()) {
            throw bad_request("'" + prefix + ".role' must be a string", prefix + ".role");
        }
        std::string r = role->get<std::string>();
        if (!roles.count(r)) {
            throw bad_request("'" + prefix + ".role' must be one of system, developer, user, assistant; got '" + r +
                                  "'",
                              prefix + ".role");
        }
        if (r == "developer") {
            r = "system";  // OpenAI's newer name for system instructions; templates know only "system"
        }
        spec.messages.push_back({r, message_content(msg, r, i)});
    }
}

}  // namespace

completion_spec parse_completion_request(const std::string & body_text, api_kind kind) {
    json body = parse_json_body(body_text);
    if (!body.is_object()) {
        throw bad_request(std::string("the request body must be a JSON object, got ") + type_name(body));
    }

    static const std::set<std::string> common = {
        "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n", "stream",
        "stream_options", "presence_penalty", "frequency_penalty", "repeat_penalty", "repeat_last_n", "user",
        "logit_bias", "logprobs", "prediction", "speculate", "draft_max", "return_tokens", "cache_prompt", "corpus",
        "n_predict"};
    static const std::set<std::string> completion_only = {"prompt", "echo", "best_of", "suffix"};
    static const std::set<std::string> chat_only = {
        "messages", "max_completion_tokens", "top_logprobs", "response_format", "tools", "tool_choice",
        "parallel_tool_calls", "functions", "function_call"};
    const auto & own = kind == api_kind::chat ? chat_only : completion_only;
    for (const auto & [k, _] : body.items()) {
        if (!common.count(k) && !own.count(k) && !is_foreign_field(k, kind)) {
            throw bad_request("Unrecognized request argument supplied: " + k, k, "unrecognized_argument");
        }
    }
    check_foreign_fields(body, kind);

    completion_spec spec;
    spec.kind = kind;
    if (const json * m = find(body, "model")) {
        if (!m->is_string()) {
            wrong_type("model", "a string", *m);
        }
        spec.model = m->get<std::string>();
    }
    if (kind == api_kind::chat) {
        parse_messages(body, spec);
    } else {
        parse_prompt(body, spec);
    }

    const std::int64_t int_max = std::numeric_limits<std::int32_t>::max();
    // -1 in each is as if the field were absent (the server's --n-predict, by default no limit), as llama-server
    // takes it: llama.cpp's web UI sends max_tokens: -1 for "unlimited". n_predict is llama-server's name, read first.
    auto limit = [&](const char * key) {
        const auto n = (std::int32_t) get_int(body, key, -1, -1, int_max);
        if (n == 0) {
            throw bad_request("'" + std::string(key) + "' must be -1 (no limit) or positive, got 0", key);
        }
        return n;
    };
    spec.max_tokens = limit("max_tokens");
    if (kind == api_kind::chat && find(body, "max_completion_tokens")) {
        spec.max_tokens = limit("max_completion_tokens");
    }
    if (find(body, "n_predict")) {
        spec.max_tokens = limit("n_predict");
    }
    if (get_int(body, "n", 1, 1, int_max) != 1) {
        throw bad_request("'n' must be 1: this server returns one choice per request", "n", "unsupported_parameter");
    }

    auto & s  = spec.sampling;
    s.temp    = (float) get_number(body, "temperature", 1.0, 0.0, 2.0);
    s.top_p   = (float) get_number(body, "top_p", 1.0, 0.0, 1.0);
    s.top_k   = (std::int32_t) get_int(body, "top_k", 0, 0, int_max);
    s.min_p   = (float) get_number(body, "min_p", 0.0, 0.0, 1.0);
    s.presence_penalty  = (float) get_number(body, "presence_penalty", 0.0, -2.0, 2.0);
    s.frequency_penalty = (float) get_number(body, "frequency_penalty", 0.0, -2.0, 2.0);
    s.repeat_penalty    = (float) get_number(body, "repeat_penalty", 1.0, 0.0, 10.0);
    s.repeat_last_n     = (std::int32_t) get_int(body, "repeat_last_n", 64, 0, int_max);
    if (s.top_p <= 0.0f) {
        throw bad_request("'top_p' must be greater than 0", "top_p");
    }
    if (s.repeat_penalty <= 0.0f) {
        throw bad_request("'repeat_penalty' must be greater than 0", "repeat_penalty");
    }
    // -1 (or no seed) draws a random seed; other values are taken modulo 2^32.
    const std::int64_t seed = get_int(body, "seed", -1, std::numeric_limits<std::int64_t>::min(),
                                      std::numeric_limits<std::int64_t>::max());
    s.seed = seed == -1 ? 0xFFFFFFFFu : (std::uint32_t) (std::uint64_t) seed;

    spec.stop   = get_stop(body);
    spec.stream = get_bool(body, "stream", false);
    if (const json * so = find(body, "stream_options")) {
        if (!so->is_object()) {
            wrong_type("stream_options", "an object", *so);
        }
        for (const auto & [k, _] : so->items()) {
            if (k != "include_usage") {
                throw bad_request("Unrecognized request argument supplied: stream_options." + k,
                                  "stream_options." + k, "unrecognized_argument");
            }
        }
        spec.include_usage = get_bool(*so, "include_usage", false);
    }
    if (const json * u = find(body, "user"); u && !u->is_string()) {
        wrong_type("user", "a string", *u);
    }

    require_default(body, "logit_bias", json::object(), "logit biases are not implemented");
    if (kind == api_kind::chat) {
        const auto top = (std::int32_t) get_int(body, "top_logprobs", -1, 0, 20);
        if (get_bool(body, "logprobs", false)) {
            spec.logprobs = std::max(0, top);
        } else if (top >= 0) {
            throw bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
        }
        require_default(body, "response_format", json{{"type", "text"}}, "only {\"type\": \"text\"} is supported");
        for (const char * k : {"tools", "functions"}) {
            require_default(body, k, json::array(), "tool calls are not supported");
        }
        for (const char * k : {"tool_choice", "function_call"}) {
            require_default(body, k, "none", "tool calls are not supported");
        }
        require_default(body, "parallel_tool_calls", true, "tool calls are not supported");
    } else {
        spec.logprobs = (std::int32_t) get_int(body, "logprobs", -1, 0, 20);
        require_default(body, "echo", false, "echoing the prompt is not supported");
        require_default(body, "best_of", 1, "only one candidate is generated");
        require_default(body, "suffix", "", "insertion (suffix) is not supported");
    }

    parse_prediction(body, spec);
    spec.speculate     = get_bool(body, "speculate", true);
    spec.cache_prompt  = get_bool(body, "cache_prompt", true);
    spec.draft_max     = (std::int32_t) get_int(body, "draft_max", -1, 0, 256);
    spec.return_tokens = get_bool(body, "return_tokens", false);
    spec.corpora       = get_corpus(body);
    return spec;
}
