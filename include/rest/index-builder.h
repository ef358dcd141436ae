// Building datastores. The builder is separate from the reader (datastore.h).
#pragma once

#include "rest/tokenizer.h"
#include "rest/types.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace rest {

struct tokenizer_identity {
    std::uint64_t fingerprint = 0;
    std::string   description;
    std::int32_t  n_vocab = 0;  // decides the token width: u16 when n_vocab < 65535, else u32
};

// Writes a datastore from already-tokenized documents (atomically: temp file, fsync, rename).
// Used by `rest index build` after tokenizing, and by tests and benchmarks that make synthetic corpora.
void write_datastore(const std::string & path, std::span<const std::vector<token_id>> documents,
                     const tokenizer_identity & tok, int n_threads = 1);

}  // namespace rest
