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
