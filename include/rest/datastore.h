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
    std::int64_t  n_vocab = 0;            // tokens are < n_vocab
    std::uint64_t n_documents = 0;
    std::uint64_t n_tokens = 0;           // corpus tokens, separators excluded
    std::uint64_t n_bytes = 0;            // on disk, all shards
    std::size_t   n_shards = 0;
};

class datastore {
  public:
    virtual ~datastore() = default;

    // What the caller will do with an open datastore: lookups (drafting), or at most one pass over its bytes
    // (inspect, verify, append, compact), which a background page prefetch would only double in memory and I/O.
    enum class access { lookups, one_pass };

    // Opens a datastore file or shard directory by mmap. Throws user_error naming the path and the problem
    // (missing, truncated, wrong magic, future version). If expected_fingerprint is non-zero and differs from
    // the index's, throws user_error naming both tokenizers. For lookups, a file of 1 MiB or more (up to half the
    // RAM) also gets a background thread, at the lowest CPU priority, that maps its pages into the process (its
    // lookup tables first), so lookups stop taking page faults soon after. A shard of a format version 1 file has no
    // bigram table in the file (8 bytes per distinct bigram, which makes a bigram's first search a lookup in memory):
    // the thread then builds it (index_shard::build_bigrams). REST_INDEX_PREFETCH=0 turns both off; destroying the
    // datastore stops the thread within one 32 MiB step or 4,096 suffixes.
    static std::unique_ptr<datastore> open(const std::string & path, std::uint64_t expected_fingerprint = 0,
                                           const std::string & expected_description = "",
                                           access how = access::lookups);
    // Several datastores as one (`--index A --index B`): their shards in the order given, counts summed. They must
    // share a tokenizer (user_error naming the odd one out). One path is open(path).
    static std::unique_ptr<datastore> open(const std::vector<std::string> & paths, std::uint64_t expected_fingerprint = 0,
                                           const std::string & expected_description = "");

    // Open datastores as one, sharing them (nullptr for none, the one itself for one). names (one per part) go in
    // the error for a tokenizer mismatch.
    static std::shared_ptr<const datastore> combine(std::vector<std::shared_ptr<const datastore>> parts,
                                                    const std::vector<std::string> & names);

    virtual const datastore_info & info() const = 0;
    virtual std::span<const index_shard> shards() const = 0;
    // Reads every section and checks its xxhash checksum. Throws user_error naming the first bad section.
    virtual void verify() const = 0;
};

// Queries over all shards of a datastore. Every function is const and thread-safe.

// The occurrences of one token sequence: a suffix-array range per shard (shards order).
struct datastore_match {
    std::size_t           length = 0;  // tokens matched
    std::vector<sa_range> ranges;      // ranges[i] lies in shards()[i]
    std::uint64_t         count  = 0;  // occurrences over all shards

    bool empty() const { return count == 0; }
};

// Occurrences of `pattern` in every shard. O(|pattern| log n) per shard.
datastore_match find_all(const datastore & ds, std::span<const token_id> pattern);

// The longest suffix of `context` (at most max_length tokens) that occurs in the datastore, found by binary search on
// the length (occurrence is monotone: a suffix that occurs has every shorter suffix occurring). length 0 when not
// even the last token occurs.
datastore_match find_longest_suffix(const datastore & ds, std::span<const token_id> context, std::size_t max_length);

struct token_count {
    token_id      token = 0;  // k_doc_end: the occurrence ends its document
    std::uint64_t count = 0;
};

// The tokens that follow the occurrences in m (depth m.length), most frequent first (ties by token id), at most
// `limit`. Walks runs rather than occurrences: O(distinct tokens x log range) per shard.
std::vector<token_count> next_token_counts(const datastore & ds, const datastore_match & m, std::size_t limit);

}  // namespace rest
