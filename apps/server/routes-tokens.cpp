// POST /tokenize, POST /detokenize and POST /apply-template: llama-server's endpoints for looking at what the model
// sees. They read only the vocabulary and the chat template, so they answer on the HTTP thread, never queueing.
#include "http-util.h"
#include "oai-request.h"
#include "routes.h"
#include "token-request.h"

using json = nlohmann::json;

void add_token_routes(httplib::Server & svr, server_state & st) {
    svr.Post("/tokenize", [&st](const httplib::Request & req, httplib::Response & res) {
        st.metrics.on_request("tokenize");
        try {
            reply_json(res, 200, tokenize_reply(st.model.vocab(), parse_tokenize_request(req.body)));
        } catch (const api_error & e) {
            reply_error(res, e);
        }
    });

    svr.Post("/detokenize", [&st](const httplib::Request & req, httplib::Response & res) {
        st.metrics.on_request("detokenize");
        try {
            const auto ids = parse_detokenize_request(req.body, st.model.vocab().n_vocab());
            reply_json(res, 200, detokenize_reply(st.model.vocab(), ids));
        } catch (const api_error & e) {
            reply_error(res, e);
        }
    });

    // Body: a chat request ({"messages": [...]} and optionally the other chat fields, which are checked and
    // ignored); reply {"prompt": "..."}: the text a chat request with these messages generates from.
    svr.Post("/apply-template", [&st](const httplib::Request & req, httplib::Response & res) {
        st.metrics.on_request("apply_template");
        try {
            const completion_spec spec = parse_completion_request(req.body, api_kind::chat);
            reply_json(res, 200, json{{"prompt", render_chat(st.chat, spec.messages)}});
        } catch (const api_error & e) {
            reply_error(res, e);
        }
    });
    for (const char * path : {"/tokenize", "/detokenize", "/apply-template"}) refuse_other_methods(svr, path, "POST");
}
