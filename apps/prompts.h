// Reading prompt sets for `rest generate` and `rest bench`: a plain text file is one prompt; JSONL (or a JSON
// array) gives one prompt per record through a dotted field path.
#pragma once

#include <string>
#include <vector>

struct prompt_record {
    std::vector<std::string> turns;  // one entry for plain prompts; several for multi-turn sets (MT-Bench)
    std::string              prediction;  // the record's predicted output (prediction_field), "" without one
};

// Throws rest::user_error naming the file and line on bad input. .gz files are read through gzip -dc; "-" reads
// standard input (a text prompt: it has no extension). A non-empty prediction_field (JSON records only) is the
// dotted field of each record's predicted output, a string.
std::vector<prompt_record> read_prompt_file(const std::string & path, const std::string & field,
                                            const std::string & prediction_field = "");

// A whole file as text (the --prediction-file of generate; .gz through gzip -dc); throws rest::user_error when it
// cannot be read.
std::string read_text_file(const std::string & path);
