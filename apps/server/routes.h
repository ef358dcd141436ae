// The HTTP routes. Completions (streamed or not) live in routes-completion.cpp; health, models, metrics and
// the online corpus in routes-info.cpp;
// tokenize, detokenize and apply-template in routes-tokens.cpp.
#pragma once

#include "server-state.h"

#include <httplib.h>

// POST /v1/completions, POST /v1/chat/completions
void add_completion_routes(httplib::Server & svr, server_state & st);
// POST /tokenize, POST /detokenize, POST /apply-template (llama-server's shapes)
void add_token_routes(httplib::Server & svr, server_state & st);
// GET /health, GET /v1/models, GET /metrics, POST and GET /v1/corpus
void add_info_routes(httplib::Server & svr, server_state & st);
// POST, GET /v1/corpora and DELETE /v1/corpora/NAME: named corpora (corpora.h).
void add_corpora_routes(httplib::Server & svr, server_state & st);
