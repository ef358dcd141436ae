// Errors a client can cause, carried to the HTTP layer as OpenAI-style error objects:
//   {"error": {"message": ..., "type": ..., "param": ... | null, "code": ... | null}}
#pragma once

#include <nlohmann/json.hpp>

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

// Parses a request body as JSON; malformed JSON is a 400 naming the parser's complaint.
inline nlohmann::json parse_json_body(const std::string & body_text) {
    try {
        return nlohmann::json::parse(body_text);
    } catch (const nlohmann::json::exception & e) {
        throw bad_request(std::string("the request body is not valid JSON: ") + e.what());
    }
}

