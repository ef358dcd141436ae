// Request fields of OpenAI's API and of llama-server's that this server does not implement.
//
// Clients written for either send them: OpenAI's SDKs pass `store`, `metadata` or `service_tier` through, and
// llama.cpp's web UI sends its sampler settings (`samplers`, `dry_*`, `xtc_*`, `typical_p`, ...) on every request.
// Refusing every unknown field broke those clients; ignoring them all would let a request that asks for a grammar
// or a mirostat sampler get output it did not ask for. So each known field is accepted where its value asks for
// nothing this server would do differently (OpenAI's or llama-server's default, or a setting with no effect on the
// tokens), and refused with a 400 naming it where it would change the output. Fields neither API has stay refused
// as unrecognized, as OpenAI refuses them.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

enum class api_kind;

// Whether `key` is such a field for this endpoint.
bool is_foreign_field(const std::string & key, api_kind kind);

// Throws a 400 (api_error) for the first such field of body whose value this server cannot honour.
void check_foreign_fields(const nlohmann::json & body, api_kind kind);
