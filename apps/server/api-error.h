// Errors a client can cause, carried to the HTTP layer as OpenAI-style error objects:
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

struct api_error : std::runtime_error {
    int         status;  // HTTP status
    std::string type;    // "invalid_request_error", "authentication_error", "server_error", ...
    std::string param;   // offending request field ("": null)
    std::string code;    // machine-readable code ("": null)

    api_error(int status_, std::string message, std::string type_, std::string param_ = "", std::string code_ = "") :
        std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)),
        code(std::move(code_)) {}
};

// 400 invalid_request_error naming the field.
inline api_error bad_request(std::string message, std::string param = "", std::string code = "") {
    return api_error(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

// The deepest nesting of arrays and objects in a JSON text (strings skipped), counted up to limit + 1.
inline int json_depth(const std::string & text, int limit) {
    int  depth = 0, most = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size() && most <= limit; ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            most = std::max(most, ++depth);
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return most;
}

// Parses a request body as JSON; malformed JSON is a 400 naming the parser's complaint. So is nesting deeper than
// any request of these APIs has: parsed, an 8 MB body of 4M nested arrays took 300 MB.
inline nlohmann::json parse_json_body(const std::string & body_text) {
    constexpr int k_depth_max = 64;
    if (json_depth(body_text, k_depth_max) > k_depth_max) {
        throw bad_request("the request body nests arrays or objects more than " + std::to_string(k_depth_max) +
                          " deep");
    }
    try {
        return nlohmann::json::parse(body_text);
    } catch (const nlohmann::json::exception & e) {
        throw bad_request(std::string("the request body is not valid JSON: ") + e.what());
    }
}

