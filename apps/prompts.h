// Reading prompt sets for `rest generate` and `rest bench`: a plain text file is one prompt; JSONL (or a JSON
// array) gives one prompt per record through a dotted field path.
#pragma once

#include <string>
#include <vector>

struct prompt_record {
    std::vector<std::string> turns;  // one entry for plain prompts; several for multi-turn sets (MT-Bench)
};

// Throws rest::user_error naming the file and line on bad input. .gz files are read through gzip -dc.
std::vector<prompt_record> read_prompt_file(const std::string & path, const std::string & field);
