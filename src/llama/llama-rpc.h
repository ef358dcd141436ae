// llama.cpp's RPC backend: layers of a model on `rpc-server` processes, reached over TCP (docs/deployment.md).
#pragma once

#include <string>
#include <vector>

namespace rest {

// Splits "HOST:PORT[,HOST:PORT...]" into endpoints. Throws user_error for an empty list or an endpoint without a
// host or a port in 1..65535, naming it.
std::vector<std::string> parse_rpc_servers(const std::string & list);

// Adds each server's devices to llama.cpp's device list (as its own --rpc does), once per process and endpoint, so
// that -ngl places layers on them. llama.cpp aborts the process when it cannot connect, so each endpoint is first
// probed with a plain TCP connect: a server that is down or unreachable is a one-line user_error instead. Once
// connected, a server that goes away mid-run ends the process with llama.cpp's message on one line and exit 1.
void llama_add_rpc_servers(const std::vector<std::string> & endpoints);

}  // namespace rest
