#include "token-request.h"

#include "api-error.h"

#include "rest/utf8.h"

#include <algorithm>
#include <cstdint>
#include <set>

using json = nlohmann::json;

namespace {

json parse_object(const std::string & body_text) {
    json body = parse_json_body(body_text);
    if (!body.is_object()) {
        throw bad_request(std::string("the request body must be a JSON object, got ") + body.type_name());
    }
    return body;
}

void refuse_unknown(const json & body, const std::set<std::string> & known) {
    for (const auto & [k, _] : body.items()) {
        if (!known.count(k)) {
            throw bad_request("Unrecognized request argument supplied: " + k, k, "unrecognized_argument");
        }
    }
}

bool get_bool(const json & body, const char * key, bool def) {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) {
        return def;
    }
    if (!it->is_boolean()) {
        throw bad_request(std::string("'") + key + "' must be a boolean, got " + it->type_name(), key);
    }
    return it->get<bool>();
}

// A token id in [0, n_vocab): an integer JSON number (2.0 and "2" are refused).
rest::token_id get_token(const json & v, std::int32_t n_vocab, const std::string & field) {
    if (!v.is_number_integer()) {
        throw bad_request("'" + field + "' must hold token ids (integers), got " + v.type_name(), field);
    }
    const std::int64_t t = v.is_number_unsigned() ? (std::int64_t) std::min<std::uint64_t>(v.get<std::uint64_t>(), INT64_MAX)
                                                  : v.get<std::int64_t>();
    if (t < 0 || t >= n_vocab) {
        throw bad_request("'" + field + "' token id " + std::to_string(t) + " is outside the vocabulary (" +
                              std::to_string(n_vocab) + " tokens)",
                          field);
    }
    return (rest::token_id) t;
}

}  // namespace

tokenize_request parse_tokenize_request(const std::string & body_text) {
    const json body = parse_object(body_text);
    refuse_unknown(body, {"content", "add_special", "parse_special", "with_pieces"});
    tokenize_request r;
    const auto it = body.find("content");
    if (it == body.end()) {
        throw bad_request("'content' is required", "content");
    }
    if (!it->is_string() && !it->is_array()) {
        throw bad_request(std::string("'content' must be a string or an array of strings and token ids, got ") +
                              it->type_name(),
                          "content");
    }
    if (it->is_array()) {
        for (const auto & part : *it) {
            if (!part.is_string() && !part.is_number_integer()) {
                throw bad_request(std::string("'content' array items must be strings or token ids, got ") +
                                      part.type_name(),
                                  "content");
            }
        }
    }
    r.content       = *it;
    r.add_special   = get_bool(body, "add_special", r.add_special);
    r.parse_special = get_bool(body, "parse_special", r.parse_special);
    r.with_pieces   = get_bool(body, "with_pieces", r.with_pieces);
    return r;
}

json tokenize_reply(const rest::tokenizer & tok, const tokenize_request & req) {
    std::vector<rest::token_id> ids;
    if (req.content.is_string()) {
        ids = tok.tokenize(req.content.get<std::string>(), req.add_special, req.parse_special);
    } else {
        bool first = true;  // llama-server's tokenize_mixed: BOS only before a leading string
        for (const auto & part : req.content) {
            if (part.is_string()) {
                const auto p = tok.tokenize(part.get<std::string>(), first && req.add_special, req.parse_special);
                ids.insert(ids.end(), p.begin(), p.end());
            } else {
                ids.push_back(get_token(part, tok.n_vocab(), "content"));
            }
            first = false;
        }
    }
    json tokens = json::array();
    for (const rest::token_id t : ids) {
        if (!req.with_pieces) {
            tokens.push_back(t);
            continue;
        }
        const std::string piece = tok.piece(t);
        json              pj;
        if (rest::find_invalid_utf8(piece) == std::string_view::npos) {
            pj = piece;
        } else {
            pj = json::array();
            for (const unsigned char c : piece) pj.push_back((int) c);
        }
        tokens.push_back(json{{"id", t}, {"piece", std::move(pj)}});
    }
    return json{{"tokens", std::move(tokens)}};
}

std::vector<rest::token_id> parse_detokenize_request(const std::string & body_text, std::int32_t n_vocab) {
    const json body = parse_object(body_text);
    refuse_unknown(body, {"tokens"});
    const auto it = body.find("tokens");
    if (it == body.end()) {
        throw bad_request("'tokens' is required", "tokens");
    }
    if (!it->is_array()) {
        throw bad_request(std::string("'tokens' must be an array of token ids, got ") + it->type_name(), "tokens");
    }
    std::vector<rest::token_id> ids;
    ids.reserve(it->size());
    for (const auto & v : *it) {
        ids.push_back(get_token(v, n_vocab, "tokens"));
    }
    return ids;
}

json detokenize_reply(const rest::tokenizer & tok, std::span<const rest::token_id> tokens) {
    std::string text;
    for (const rest::token_id t : tokens) {
        text += tok.piece(t);
    }
    return json{{"content", std::move(text)}};
}
