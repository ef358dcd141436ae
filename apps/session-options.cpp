// Command-line options shared by the commands that open a session (generate, bench).
#include "commands.h"
#include "session.h"

#include <string>

void add_layout_option(CLI::App * cmd, std::string & layout, bool & context_per_slot) {
    cmd->add_option("--draft-layout", layout,
                    "How drafts are verified: tree (branches, unified KV pool shared by slots), chain (each tree's "
                    "best path in its own sequence, no per-step layout overhead, bit-exact on quantized CPU models) "
                    "or auto (chain, then tree where rows and branches are measured nearly free: t(16) <= 2 t(1) and a "
                    "17-row tree step, pass and commit, <= 2 plain steps)")
        ->check(CLI::IsMember({"auto", "tree", "chain"}))
        ->capture_default_str();
    cmd->add_flag("--context-per-slot", context_per_slot,
                  "Tree layout with several slots: one llama.cpp context per slot instead of one shared KV pool, so "
                  "each slot computes what it would alone (bit-exact with plain decoding where one slot is: quantized "
                  "models with flash attention on a CPU); costs one forward pass per slot per step");
}

void add_seed_option(CLI::App * cmd, std::uint32_t & seed, const std::string & what) {
    cmd->add_option("--seed", seed, what)
        ->transform([](std::string v) { return v == "-1" ? std::string("4294967295") : v; })  // llama.cpp's -1
        ->capture_default_str();
}

CLI::Validator draft_nodes_range() {
    return CLI::Range(-1, 1 << 20);
}

void add_recalibrate_option(CLI::App * cmd, bool & recalibrate) {
    cmd->add_flag("--recalibrate", recalibrate,
                  "Measure the verify cost again (e.g. after a change of machine load) and replace the cached table");
}

void add_warm_up_option(CLI::App * cmd, bool & warm_up) {
    cmd->add_flag("--no-warmup", [&warm_up](std::int64_t) { warm_up = false; },
                  "Skip the warm-up passes before the first request (as llama.cpp's --no-warmup): the first steps of "
                  "each size then run cold");
}

void add_index_option(CLI::App * cmd, std::vector<std::string> & paths, const std::string & note) {
    cmd->add_option("--index", paths,
                    "Datastore built with `rest index build` (grown with `rest index append`); repeat it to draft "
                    "from several as one" + note)
        ->allow_extra_args(false);  // one path per --index, so that a path never swallows what follows
}

void add_offload_options(CLI::App * cmd, std::int32_t & n_gpu_layers, std::string & rpc_servers) {
    cmd->add_option("--ngl,--gpu-layers,--n-gpu-layers", n_gpu_layers,
                    "Layers to offload to the GPU or the --rpc servers (99: all)")
        ->capture_default_str();
    cmd->add_option("--rpc", rpc_servers,
                    "llama.cpp rpc-server processes to spread the offloaded layers over: HOST:PORT[,HOST:PORT...] "
                    "(docs/deployment.md)");
}

void add_attention_options(CLI::App * cmd, std::int32_t & flash_attn, std::string & cache_type_k,
                           std::string & cache_type_v) {
    // llama.cpp's spellings too (common/arg.cpp: is_truthy / is_falsey / is_autoy), so `-fa 1` means what it does there.
    cmd->add_option_function<std::string>(
           "--flash-attn",
           [&flash_attn](const std::string & v) {
               const bool on = v == "on" || v == "enabled" || v == "true" || v == "1";
               const bool off = v == "off" || v == "disabled" || v == "false" || v == "0";
               flash_attn = on ? 1 : off ? 0 : -1;
           },
           "Flash attention (llama.cpp's -fa): auto (CPU: on for quantized models, off for F32/F16), on, off")
        ->check(CLI::IsMember({"auto", "on", "off", "enabled", "disabled", "true", "false", "1", "0", "-1"}))
        ->default_str("auto");
    for (auto [name, type] : {std::pair{"--cache-type-k", &cache_type_k}, {"--cache-type-v", &cache_type_v}}) {
        cmd->add_option(name, *type,
                        "KV cache type (llama.cpp's -ctk/-ctv). "
                        "On a CPU, bf16 for both keeps flash-attention outputs bit-exact past 512 cells with 2+ threads")
            ->check(CLI::IsMember({"f16", "f32", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}))
            ->capture_default_str();
    }
}

void add_verify_options(CLI::App * cmd, session_params & sp) {
    add_layout_option(cmd, sp.layout, sp.ctx.context_per_slot);
    add_recalibrate_option(cmd, sp.recalibrate);
    add_attention_options(cmd, sp.ctx.flash_attn, sp.ctx.cache_type_k, sp.ctx.cache_type_v);
}
