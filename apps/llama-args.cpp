#include "llama-args.h"

#include "rest/types.h"

#include <cstring>
#include <utility>

std::span<const llama_arg_alias> llama_arg_aliases() {
    static const std::vector<llama_arg_alias> aliases = {
        {"-ngl", "--n-gpu-layers", {"generate", "bench", "serve"}},
        {"-np", "--parallel", {"serve"}},
        {"-fa", "--flash-attn", {"generate", "bench", "serve"}},
        {"-ctk", "--cache-type-k", {"generate", "bench", "serve"}},
        {"-ctv", "--cache-type-v", {"generate", "bench", "serve"}},
    };
    return aliases;
}

namespace {

// llama.cpp's multi-letter short names that rest has no option for: CLI11 would read "-tb 1" as "-t b" and say it
// cannot convert "b", so they are refused by name instead. {llama.cpp's short name, its long name}.
constexpr std::pair<const char *, const char *> k_not_here[] = {
    {"-tb", "--threads-batch"}, {"-ub", "--ubatch-size"}, {"-cnv", "--conversation"}, {"-no-cnv", "--no-conversation"},
    {"-mli", "--multiline-input"}, {"-sys", "--system-prompt"}, {"-dev", "--device"}, {"-ts", "--tensor-split"},
    {"-sm", "--split-mode"}, {"-mg", "--main-gpu"}, {"-nkvo", "--no-kv-offload"}, {"-md", "--model-draft"},
    {"-hf", "--hf-repo"}, {"-hfr", "--hf-repo"}, {"-hff", "--hf-file"}, {"-ot", "--override-tensor"},
    {"-cmoe", "--cpu-moe"}, {"-kvu", "--kv-unified"}, {"-cb", "--cont-batching"}, {"-sp", "--special"}};

// Whether a is an option name rather than a value: "-x", "--xy", but not "-1" (a negative number, e.g. -fa -1).
bool looks_like_option(const std::string & a) {
    return a.size() >= 2 && a[0] == '-' && !(a[1] >= '0' && a[1] <= '9');
}

}  // namespace

std::vector<std::string> rewrite_llama_args(std::span<const std::string> args) {
    std::vector<std::string> out;
    out.reserve(args.size());
    bool positional = false;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string & a = args[i];
        if (positional || a == "--") {
            positional = true;
            out.push_back(a);
            continue;
        }
        const llama_arg_alias * hit = nullptr;
        for (const auto & al : llama_arg_aliases()) {
            if (a == al.llama) {
                hit = &al;
                break;
            }
        }
        for (const auto & [llama, name] : k_not_here) {
            if (a == llama) {
                throw rest::user_error(a + " is llama.cpp's " + name + ", which rest does not have");
            }
        }
        if (!hit) {
            out.push_back(a);
        } else if (std::strcmp(hit->llama, "-fa") == 0 && (i + 1 == args.size() || looks_like_option(args[i + 1]))) {
            out.push_back(std::string(hit->rest) + "=on");
        } else {
            out.push_back(hit->rest);
        }
    }
    return out;
}
