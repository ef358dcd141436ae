// GET /health (and /v1/health), GET /v1/models (and /models), GET /props, GET /metrics, POST and GET /v1/corpus.
#include "http-util.h"
#include "oai-request.h"
#include "routes.h"

using json = nlohmann::json;

metrics_gauges server_state::gauges() const {
    const engine_load l = eng.load();
    metrics_gauges    g;
    g.n_slots           = l.n_slots;
    g.n_slots_busy      = l.n_busy;
    g.n_queued          = l.n_queued;
    g.history_tokens    = history.n_tokens();
    g.history_documents = history.n_documents();
    g.draining          = draining.load();
    return g;
}

namespace {

json corpus_stats(const server_state & st) {
    json hist = {{"n_documents", st.history.n_documents()},
                 {"n_tokens", st.history.n_tokens()},
                 {"n_tokens_max", st.history.params().n_tokens_max},
                 {"path", st.params.history_path.empty() ? json(nullptr) : json(st.params.history_path)}};
    json ds = nullptr;
    if (st.datastore) {
        const auto & i = st.datastore->info();
        ds             = {{"path", st.params.index_paths.size() == 1 ? json(st.params.index_paths[0]) : json(st.params.index_paths)},
                          {"n_documents", i.n_documents},
                          {"n_tokens", i.n_tokens},
                          {"n_shards", i.n_shards},
                          {"n_bytes", i.n_bytes},
                          {"tokenizer", i.tokenizer_description}};
    }
    return json{{"object", "corpus"}, {"history", hist}, {"datastore", ds}};
}

// Body: {"text": "..."} or {"texts": ["...", ...]}; each text becomes one document of the online store.
std::vector<std::string> corpus_texts(const std::string & body_text) {
    json body = parse_json_body(body_text);
    if (!body.is_object()) {
        throw bad_request("the request body must be a JSON object with \"text\" or \"texts\"");
    }
    for (const auto & [k, _] : body.items()) {
        if (k != "text" && k != "texts") {
            throw bad_request("Unrecognized request argument supplied: " + k, k, "unrecognized_argument");
        }
    }
    std::vector<std::string> texts;
    if (body.contains("text")) {
        if (!body["text"].is_string()) {
            throw bad_request("'text' must be a string", "text");
        }
        texts.push_back(body["text"].get<std::string>());
    }
    if (body.contains("texts")) {
        if (!body["texts"].is_array()) {
            throw bad_request("'texts' must be an array of strings", "texts");
        }
        for (const auto & t : body["texts"]) {
            if (!t.is_string()) {
                throw bad_request("'texts' must be an array of strings", "texts");
            }
            texts.push_back(t.get<std::string>());
        }
    }
    if (texts.empty()) {
        throw bad_request("give \"text\" (a string) or \"texts\" (an array of strings)");
    }
    for (const auto & t : texts) {
        if (t.empty()) {
            throw bad_request("corpus texts must not be empty", body.contains("texts") ? "texts" : "text");
        }
    }
    return texts;
}

}  // namespace

void add_info_routes(httplib::Server & svr, server_state & st) {
    // Each under llama-server's other names too: /v1/health, and /models for clients whose base URL has no /v1.
    const auto health = [&st](const httplib::Request &, httplib::Response & res) {
        st.metrics.on_request("health");
        const engine_load l = st.eng.load();
        json body = {{"status", st.draining.load() ? "draining" : "ok"},
                     {"slots_total", l.n_slots},
                     {"slots_busy", l.n_busy},
                     {"slots_idle", l.n_slots - l.n_busy},
                     {"queue", l.n_queued}};
        reply_json(res, st.draining.load() ? 503 : 200, body);
    };
    svr.Get("/health", health);
    svr.Get("/v1/health", health);

    const auto models = [&st](const httplib::Request &, httplib::Response & res) {
        st.metrics.on_request("models");
        const auto & info  = st.model.info();
        json         model = {{"id", st.model_id},
                              {"object", "model"},
                              {"created", st.created},
                              {"owned_by", "rest.cpp"},
                              {"meta",
                               {{"description", info.description},
                                {"n_params", info.n_params},
                                {"n_vocab", info.n_vocab},
                                {"n_ctx_train", info.n_ctx_train},
                                {"n_ctx_slot", st.limits.n_ctx_slot},
                                {"n_slots", st.eng.load().n_slots},
                                {"speculate", st.params.speculate},
                                {"datastore", st.datastore != nullptr}}}};
        reply_json(res, 200, json{{"object", "list"}, {"data", json::array({model})}});
    };
    svr.Get("/v1/models", models);
    svr.Get("/models", models);

    // llama-server's server properties, the part its clients read (llama.cpp's web UI: the context size, the
    // defaults of its sampling settings, modalities). The defaults are what a request that gives none gets.
    svr.Get("/props", [&st](const httplib::Request &, httplib::Response & res) {
        st.metrics.on_request("props");
        const rest::sampler_params d = parse_completion_request(R"({"prompt": ""})", api_kind::completion).sampling;
        const json params = {{"n_predict", st.params.n_predict},
                             {"temperature", d.temp},
                             {"top_k", d.top_k},
                             {"top_p", d.top_p},
                             {"min_p", d.min_p},
                             {"repeat_penalty", d.repeat_penalty},
                             {"repeat_last_n", d.repeat_last_n},
                             {"presence_penalty", d.presence_penalty},
                             {"frequency_penalty", d.frequency_penalty},
                             {"seed", -1},
                             {"speculative", st.params.speculate}};
        reply_json(res, 200,
                   json{{"default_generation_settings", {{"n_ctx", st.limits.n_ctx_slot}, {"params", params}}},
                        {"total_slots", st.eng.load().n_slots},
                        {"model_alias", st.model_id},
                        {"model_path", st.params.model_path},
                        {"modalities", {{"vision", false}, {"audio", false}}},
                        {"build_info", "rest.cpp"}});
    });

    svr.Get("/metrics", [&st](const httplib::Request &, httplib::Response & res) {
        st.metrics.on_request("metrics");
        res.status = 200;
        res.set_content(st.metrics.prometheus(st.gauges()), "text/plain; version=0.0.4; charset=utf-8");
    });

    svr.Get("/v1/corpus", [&st](const httplib::Request &, httplib::Response & res) {
        st.metrics.on_request("corpus");
        reply_json(res, 200, corpus_stats(st));
    });

    svr.Post("/v1/corpus", [&st](const httplib::Request & req, httplib::Response & res) {
        st.metrics.on_request("corpus");
        try {
            const std::vector<std::string> texts = corpus_texts(req.body);
            std::vector<std::vector<rest::token_id>> docs;
            std::int64_t n_tokens = 0;
            for (const auto & t : texts) {
                // Plain text: no BOS, and "<|...|>" stays text, as in a datastore built from a corpus.
                docs.push_back(st.model.vocab().tokenize(t, false, false));
                n_tokens += (std::int64_t) docs.back().size();
            }
            for (const auto & d : docs) {
                st.history.add(d);  // thread-safe; drafters see it from their next request on
            }
            st.metrics.on_corpus_add(n_tokens);
            json body              = corpus_stats(st);
            body["object"]         = "corpus.add";
            body["added_documents"] = docs.size();
            body["added_tokens"]   = n_tokens;
            reply_json(res, 200, body);
        } catch (const api_error & e) {
            reply_error(res, e);
        }
    });
    for (const char * path : {"/health", "/v1/health", "/v1/models", "/models", "/props", "/metrics"}) {
        refuse_other_methods(svr, path, "GET");
    }
    refuse_other_methods(svr, "/v1/corpus", "GET, POST");
}
