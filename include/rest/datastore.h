// A datastore: one or more memory-mapped shards of a tokenized corpus with their suffix arrays.
//
// On disk it is one file (or a directory with a manifest, for several shards). Opening validates the header and
// section sizes only, so it costs the same at any size; verify() reads everything and checks every checksum.
// The datastore owns the mappings: every index_shard it hands out is valid for the datastore's lifetime.
#pragma once

#include "rest/index-shard.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace rest {

struct datastore_info {
    std::uint32_t format_version = 0;
    std::uint64_t tokenizer_fingerprint = 0;
    std::string   tokenizer_description;  // e.g. "llama-spm, 32000 tokens"
    int           token_width = 2;        // bytes per token: 2 or 4
    std::uint64_t n_documents = 0;
    std::uint64_t n_tokens = 0;           // corpus tokens, separators excluded
    std::uint64_t n_bytes = 0;            // on disk, all shards
    std::size_t   n_shards = 0;
};

class datastore {
  public:
    virtual ~datastore() = default;

    // Opens a datastore file or shard directory by mmap. Throws user_error naming the path and the problem
    // (missing, truncated, wrong magic, future version). If expected_fingerprint is non-zero and differs from
    // the index's, throws user_error naming both tokenizers.
    static std::unique_ptr<datastore> open(const std::string & path, std::uint64_t expected_fingerprint = 0,
                                           const std::string & expected_description = "");

    virtual const datastore_info & info() const = 0;
    virtual std::span<const index_shard> shards() const = 0;
    // Reads every section and checks its xxhash checksum. Throws user_error naming the first bad section.
    virtual void verify() const = 0;
};

}  // namespace rest
