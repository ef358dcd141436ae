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
// --draft-layout and --flash-attn (apps/session-options.cpp); --draft-layout alone for `rest serve`.
void add_verify_options(CLI::App * cmd, session_params & sp);
void add_layout_option(CLI::App * cmd, std::string & layout);
// --recalibrate: measure the verify cost again instead of using the cached table (generate, bench, serve).
void add_recalibrate_option(CLI::App * cmd, bool & recalibrate);
