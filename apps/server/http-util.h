// Small helpers shared by the routes: JSON replies, OpenAI-style errors, API-key checks.
#pragma once

#include "api-error.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <string>

void reply_json(httplib::Response & res, int status, const nlohmann::json & body);
void reply_error(httplib::Response & res, const api_error & e);

// The request's bearer token equals key (compared in constant time). An empty key accepts everything.
bool authorized(const httplib::Request & req, const std::string & key);
