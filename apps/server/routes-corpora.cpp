// POST /v1/corpora, GET /v1/corpora, DELETE /v1/corpora/NAME: named corpora a request picks with `corpus`.
#include "http-util.h"
#include "routes.h"

#include <nlohmann/json.hpp>

using json = nlohmann::json;

namespace {

json info_json(const corpus_info & c) {
    return json{{"object", "corpus"}, {"name", c.name}, {"n_documents", c.n_documents}, {"n_tokens", c.n_tokens},
                {"read_only", c.read_only}};
}

// Body: {"name": "...", "text": "..."} or {"name": "...", "documents": ["...", ...]}: one document per string.
std::pair<std::string, std::vector<std::string>> corpus_request(const std::string & body_text) {
    json body = parse_json_body(body_text);
    if (!body.is_object()) {
        throw bad_request("the request body must be a JSON object with \"name\" and \"text\" or \"documents\"");
    }
    for (const auto & [k, _] : body.items()) {
        if (k != "name" && k != "text" && k != "documents") {
            throw bad_request("Unrecognized request argument supplied: " + k, k, "unrecognized_argument");
        }
    }
    if (!body.contains("name") || !body["name"].is_string()) throw bad_request("'name' must be a string", "name");
    std::vector<std::string> docs;
    if (body.contains("text")) {
        if (!body["text"].is_string()) throw bad_request("'text' must be a string", "text");
        docs.push_back(body["text"].get<std::string>());
    }
    if (body.contains("documents")) {
        if (!body["documents"].is_array()) throw bad_request("'documents' must be an array of strings", "documents");
        for (const auto & d : body["documents"]) {
            if (!d.is_string()) throw bad_request("'documents' must be an array of strings", "documents");
            docs.push_back(d.get<std::string>());
        }
    }
    if (docs.empty()) throw bad_request("give \"text\" (a string) or \"documents\" (an array of strings)");
    for (const auto & d : docs) {
        if (d.empty()) throw bad_request("documents must not be empty", body.contains("documents") ? "documents" : "text");
    }
    return {body["name"].get<std::string>(), docs};
}

api_error from(const corpus_error & e) {
    const char * type = e.status == 404 ? "not_found_error" : e.status >= 500 ? "server_error" : "invalid_request_error";
    return api_error(e.status, e.what(), type, e.status >= 500 ? "" : "name", "");
}

}  // namespace

void add_corpora_routes(httplib::Server & svr, server_state & st) {
    svr.Get("/v1/corpora", [&st](const httplib::Request &, httplib::Response & res) {
        st.metrics.on_request("corpora");
        json data = json::array();
        for (const auto & c : st.corpora.list()) data.push_back(info_json(c));
        reply_json(res, 200, json{{"object", "list"}, {"data", data}});
    });

    svr.Post("/v1/corpora", [&st](const httplib::Request & req, httplib::Response & res) {
        st.metrics.on_request("corpora");
        try {
            const auto [name, texts] = corpus_request(req.body);
            std::vector<std::vector<rest::token_id>> docs;
            for (const auto & t : texts) docs.push_back(st.model.vocab().tokenize(t, false, false));  // as /v1/corpus
            reply_json(res, 200, info_json(st.corpora.add(name, docs)));
        } catch (const corpus_error & e) {
            reply_error(res, from(e));
        } catch (const rest::user_error & e) {  // the index could not be written (disk full, permissions)
            reply_error(res, api_error(500, e.what(), "server_error", "", ""));
        } catch (const api_error & e) {
            reply_error(res, e);
        }
    });

    svr.Delete(R"(/v1/corpora/([^/]+))", [&st](const httplib::Request & req, httplib::Response & res) {
        st.metrics.on_request("corpora");
        try {
            const std::string name = req.matches[1];
            st.corpora.remove(name);
            reply_json(res, 200, json{{"object", "corpus.deleted"}, {"name", name}, {"deleted", true}});
        } catch (const corpus_error & e) {
            reply_error(res, from(e));
        }
    });
    refuse_other_methods(svr, "/v1/corpora", "GET, POST");
    refuse_other_methods(svr, R"(/v1/corpora/([^/]+))", "DELETE");
}
