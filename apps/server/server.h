// `rest serve` as an object: loads the model, the datastore and the online store, creates one llama.cpp context
// with a slot per concurrent request, binds the HTTP port, and serves until asked to shut down.
//
// Threads: the caller's thread runs run(); one engine thread owns the context and the decoder; cpp-httplib's
// worker pool runs the routes. Shutdown (request_shutdown(), e.g. from a SIGTERM watcher) drains: new requests
// get 503, in-flight and queued ones finish (up to drain_timeout_s, then they are cancelled), then the HTTP
// server and the engine stop and the online store is saved when a path is configured (and, while serving, every
// --history-save-interval seconds: history-persist.h).
#pragma once

#include "server-params.h"

#include <memory>
#include <string>

class server {
  public:
    // Throws rest::user_error for a bad model or index, a store file another server holds (a damaged one is set
    // aside instead), or a port that cannot be bound.
    explicit server(const server_params & params);
    ~server();
    server(const server &) = delete;
    server & operator=(const server &) = delete;

    int port() const;  // the bound port (useful with --port 0)
    const std::string & host() const;

    // Serves until a shutdown has completed. Throws rest::user_error when the store cannot be saved.
    void run();
    // Thread-safe and non-blocking. The first call drains; a second cancels in-flight requests at once.
    void request_shutdown();

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};
