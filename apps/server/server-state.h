// What every HTTP route reads: the loaded model and stores, the engine, the metrics, and the server's identity.
// Owned by `server` (server.h); routes hold a reference for the server's lifetime.
#pragma once

#include "corpora.h"
#include "engine.h"
#include "metrics.h"
#include "server-params.h"
#include "server-prompt.h"

#include "rest/chat-template.h"
#include "rest/datastore.h"
#include "rest/history-store.h"
#include "rest/llama-model.h"

#include <atomic>
#include <cstdint>
#include <string>

struct server_state {
    const server_params &   params;
    const rest::model &     model;
    const rest::chat_template & chat;  // renders chat requests and POST /apply-template
    const rest::datastore * datastore;  // the --index files as one; may be null
    corpus_set &            corpora;    // named corpora: the --index files and --corpus-dir's
    rest::history_store &   history;
    engine &                eng;
    server_metrics &        metrics;
    std::string             model_id;
    std::int64_t            created = 0;  // unix time the server started
    prompt_limits           limits;
    std::atomic<bool>       draining{false};
    // Streaming responses still being written. httplib::Server::stop() aborts chunked writes in progress, so a
    // draining server waits for this to reach 0 before it stops HTTP (else a drained stream loses its tail).
    std::atomic<int>        n_streams{0};

    metrics_gauges gauges() const;
};
