// Subcommands of the `rest` CLI, one file each. Each adds itself to the root app and runs from its callback;
// main() catches exceptions once and turns them into a one-line error and a non-zero exit.
#pragma once

#include <CLI/CLI.hpp>

void add_generate_command(CLI::App & root);
void add_fixture_command(CLI::App & root);
void add_index_command(CLI::App & root);
void add_bench_command(CLI::App & root);
void add_serve_command(CLI::App & root);

struct session_params;
// --draft-layout, --recalibrate and the attention options (apps/session-options.cpp), for generate and bench.
void add_verify_options(CLI::App * cmd, session_params & sp);
// --flash-attn, --cache-type-k, --cache-type-v (rest::context_params' fields of the same names); serve too.
void add_attention_options(CLI::App * cmd, std::int32_t & flash_attn, std::string & cache_type_k,
                           std::string & cache_type_v);
void add_layout_option(CLI::App * cmd, std::string & layout, bool & context_per_slot);
// --index, repeatable: datastores drafted from as one (generate, bench, serve). note ends the help text.
void add_index_option(CLI::App * cmd, std::vector<std::string> & paths, const std::string & note = "");
// --n-gpu-layers and --rpc (llama.cpp's spellings: -ngl, --rpc HOST:PORT,...), for generate, bench and serve.
void add_offload_options(CLI::App * cmd, std::int32_t & n_gpu_layers, std::string & rpc_servers);
// --recalibrate: measure the verify cost again instead of using the cached table (generate, bench, serve).
void add_recalibrate_option(CLI::App * cmd, bool & recalibrate);
// --seed, where llama.cpp's -1 means the same as 4294967295 (what `what` says it means).
void add_seed_option(CLI::App * cmd, std::uint32_t & seed, const std::string & what);
// The values --draft-max and --draft-fixed take: -1 (their default meaning) or a node count.
CLI::Validator draft_nodes_range();
// --no-warmup: no forward passes before the first request (generate, serve; llama.cpp's spelling).
void add_warm_up_option(CLI::App * cmd, bool & warm_up);
