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

// The request's bearer token equals key (compared in constant time). An empty key accepts everything.
bool authorized(const httplib::Request & req, const std::string & key);
