// Recorded greedy generations for the offline draft benchmarks: each prompt of a JSONL file, tokenized as
// `rest generate` does (BOS added, special tokens parsed), paired with the tokens plain decoding produced for it
// (`rest generate -f B.jsonl --no-spec --json`, one record per prompt, in order).
#pragma once

#include "rest/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace rest_bench {

// The options every offline draft benchmark takes: -m MODEL --index IDX --prompts B.jsonl --generations GEN.jsonl
// [--field prompt].
struct generations_args {
    std::string model, index, prompts, field = "prompt", generations;

    // Takes option a with value v if it is one of these; false for any other.
    bool take(const std::string & a, const std::string & v) {
        if (a == "-m") model = v;
        else if (a == "--index") index = v;
        else if (a == "--prompts") prompts = v;
        else if (a == "--field") field = v;
        else if (a == "--generations") generations = v;
        else return false;
        return true;
    }
    bool complete() const { return !model.empty() && !index.empty() && !prompts.empty() && !generations.empty(); }
};

struct generation {
    std::vector<rest::token_id> prompt;
    std::vector<rest::token_id> output;
};

// "1,2,4" -> {"1", "2", "4"}: list-valued options.
inline std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::stringstream        ss(s);
    for (std::string item; std::getline(ss, item, sep);) out.push_back(item);
    return out;
}

inline std::vector<generation> load_generations(const rest::tokenizer & tok, const std::string & prompts_path,
                                                const std::string & field, const std::string & gen_path) {
    std::vector<generation> out;
    std::ifstream           pf(prompts_path), gf(gen_path);
    std::string             pl, gl;
    while (std::getline(pf, pl)) {
        if (pl.find_first_not_of(" \t\r") == std::string::npos) {
            continue;  // no record, so no generation either (rest generate skips blank lines too)
        }
        if (!std::getline(gf, gl)) {
            break;
        }
        const auto pj = nlohmann::json::parse(pl);
        const auto gj = nlohmann::json::parse(gl);
        out.push_back({tok.tokenize(pj.at(field).get<std::string>(), true, true),
                       gj.at("tokens").get<std::vector<rest::token_id>>()});
        if (gj.contains("n_prompt") && gj["n_prompt"].get<std::size_t>() != out.back().prompt.size()) {
            std::fprintf(stderr, "warning: prompt %zu tokenizes to %zu tokens, the generation saw %zu\n",
                         out.size() - 1, out.back().prompt.size(), gj["n_prompt"].get<std::size_t>());
        }
    }
    return out;
}

}  // namespace rest_bench
