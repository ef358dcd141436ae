// Small helpers shared by the routes: JSON replies, OpenAI-style errors, API-key checks.
#pragma once

#include "api-error.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <string>

void reply_json(httplib::Response & res, int status, const nlohmann::json & body);
void reply_error(httplib::Response & res, const api_error & e);
// Requests for `pattern` with a method other than those in `allow` ("GET, POST") get 405 with an Allow header, as
// HTTP asks, instead of cpp-httplib's 404 (which says the path does not exist).
void refuse_other_methods(httplib::Server & svr, const std::string & pattern, const std::string & allow);

// The request's key equals key (compared in constant time): `Authorization: Bearer KEY`, as llama-server also
// `Authorization: KEY` or `X-Api-Key: KEY`. An empty key accepts everything.
bool authorized(const httplib::Request & req, const std::string & key);

// CORS: allows any origin on every response; answers a preflight (OPTIONS) itself, with 204, and returns true then.
bool answer_cors(const httplib::Request & req, httplib::Response & res);
