// llama.cpp's spellings of rest's options. llama.cpp users type multi-letter single-dash names (-ngl 99, -np 4,
// -fa on); CLI11 allows only one letter after a single dash and would read -ngl as -n -g -l, so main() rewrites
// these names to rest's long ones before CLI11 parses the command line.
#pragma once

#include <span>
#include <string>
#include <vector>

struct llama_arg_alias {
    const char *              llama;     // llama.cpp's name, e.g. "-ngl"
    const char *              rest;      // rest's long name, e.g. "--n-gpu-layers"
    std::vector<const char *> commands;  // the subcommands that have `rest` (tests check each one)
};

// Every alias main() rewrites.
std::span<const llama_arg_alias> llama_arg_aliases();

// args without the program name. Rewrites each alias that stands alone as an argument, up to a "--" (after which
// everything is positional). `-fa` without a value (llama.cpp's older flag form: last, or followed by another
// option) becomes `--flash-attn=on`; a value (on, off, auto, 1, 0, -1, ...) is kept for --flash-attn to check.
// Throws rest::user_error for a llama.cpp multi-letter name rest has no option for (-tb, -cnv, ...), naming it.
std::vector<std::string> rewrite_llama_args(std::span<const std::string> args);
