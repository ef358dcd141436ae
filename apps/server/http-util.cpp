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
    const std::string header = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (header.size() != prefix.size() + key.size() || header.compare(0, prefix.size(), prefix) != 0) {
        return false;
    }
    unsigned char diff = 0;
    for (size_t i = 0; i < key.size(); ++i) {
        diff |= (unsigned char) (header[prefix.size() + i] ^ key[i]);
    }
    return diff == 0;
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
