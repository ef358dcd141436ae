// Command-line options shared by the commands that open a session (generate, bench).
#include "commands.h"
#include "session.h"

#include <map>

void add_verify_options(CLI::App * cmd, session_params & sp) {
    cmd->add_option("--draft-layout", sp.layout,
                    "How drafts are verified: tree (branches, unified KV pool), chain (each tree's best path, no "
                    "per-step layout overhead, bit-exact on quantized CPU models) or auto (chain on CPU, tree on GPU)")
        ->check(CLI::IsMember({"auto", "tree", "chain"}))
        ->capture_default_str();
    static const std::map<std::string, int> fa = {{"auto", -1}, {"off", 0}, {"on", 1}};
    cmd->add_option("--flash-attn", sp.ctx.flash_attn, "Flash attention: auto (CPU: on for quantized models, off for F32/F16), on, off")
        ->transform(CLI::CheckedTransformer(fa, CLI::ignore_case))
        ->default_str("auto");
}
