#include "http-util.h"

#include "oai-response.h"

void reply_json(httplib::Response & res, int status, const nlohmann::json & body) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
}

void reply_error(httplib::Response & res, const api_error & e) {
    reply_json(res, e.status, error_json(e));
}

bool authorized(const httplib::Request & req, const std::string & key) {
    if (key.empty()) {
        return true;
    }
    // As llama-server reads it: Authorization, else X-Api-Key (Anthropic's clients), "Bearer " stripped if present.
    std::string given = req.get_header_value("Authorization");
    if (given.empty()) {
        given = req.get_header_value("X-Api-Key");
    }
    const std::string prefix = "Bearer ";
    if (given.compare(0, prefix.size(), prefix) == 0) {
        given.erase(0, prefix.size());
    }
    if (given.size() != key.size()) {
        return false;
    }
    unsigned char diff = 0;
    for (size_t i = 0; i < key.size(); ++i) {
        diff |= (unsigned char) (given[i] ^ key[i]);
    }
    return diff == 0;
}

bool answer_cors(const httplib::Request & req, httplib::Response & res) {
    // Any origin, as llama-server by default: browser clients (llama.cpp's web UI served elsewhere, notebooks) call
    // the API from other origins. No credentials: the API key travels in a header, not a cookie.
    res.set_header("Access-Control-Allow-Origin", "*");
    if (req.method != "OPTIONS") {
        return false;
    }
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");  // DELETE: /v1/corpora/NAME
    res.set_header("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type, X-Api-Key" : asked);
    res.set_header("Access-Control-Max-Age", "86400");
    res.status = 204;
    return true;
}

void refuse_other_methods(httplib::Server & svr, const std::string & pattern, const std::string & allow) {
    const auto refuse = [allow](const httplib::Request & req, httplib::Response & res) {
        res.set_header("Allow", allow);
        reply_error(res, api_error(405, req.method + " is not allowed on " + req.path + ": use " + allow,
                                   "invalid_request_error", "", "method_not_allowed"));
    };
    const auto allowed = [&allow](const std::string & m) { return allow.find(m) != std::string::npos; };
    if (!allowed("GET")) svr.Get(pattern, refuse);
    if (!allowed("POST")) svr.Post(pattern, refuse);
    if (!allowed("PUT")) svr.Put(pattern, refuse);
    if (!allowed("PATCH")) svr.Patch(pattern, refuse);
    if (!allowed("DELETE")) svr.Delete(pattern, refuse);
}
