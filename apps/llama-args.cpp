#include "llama-args.h"

#include <cstring>

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
