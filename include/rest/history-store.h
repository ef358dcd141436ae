// A bounded store of earlier generations, shared by every request of a process: the "past outputs" draft source.
//
// Contents: whole documents (one per finished request), oldest first. The store keeps at most n_tokens_max tokens;
// when an addition passes the bound, the oldest documents are dropped first (FIFO by tokens; see below for the
// granularity). A document longer than the bound keeps only its last n_tokens_max tokens.
//
// Search: the documents live in a few immutable segments, each a small in-memory suffix array (index_shard over
// u32 tokens), so drafting gets its counts from the same code as the datastore. Segments form a time-ordered
// log-structured list: a new document becomes its own segment, and the newest two merge while the newer one is at
// least half the size of the older (sizes roughly halve from old to new: O(log) segments; each token is
// re-sorted O(log) times). Segments never grow beyond n_tokens_max / 4, and eviction drops whole oldest segments,
// so after an addition the store holds between 3/4 of the bound (once full) and the bound.
//
// Thread safety: every member function may be called concurrently. Writers (add, load, clear) serialize on one
// mutex; readers take a snapshot, an immutable view that stays valid (and keeps its segments alive) for as long
// as they hold it, whatever writers do meanwhile. A drafter takes one snapshot per request.
#pragma once

#include "rest/index-shard.h"
#include "rest/types.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace rest {

struct history_store_params {
    std::uint64_t n_tokens_max = 1 << 20;  // capacity in tokens (separators excluded)
    std::uint64_t fingerprint  = 0;        // tokenizer fingerprint saved with the store and checked on load (0: any)
};

// One immutable searchable segment: documents joined by 0xFFFFFFFF separators, with their suffix array. Not
// copyable: `shard` points into the segment's own vectors.
struct history_segment {
    history_segment() = default;
    history_segment(const history_segment &) = delete;
    history_segment & operator=(const history_segment &) = delete;

    std::vector<std::uint32_t> text;  // tokens, each document followed by a separator
    std::vector<std::uint32_t> sa;    // suffixes that start with a real token
    std::uint64_t              n_tokens    = 0;  // separators excluded
    std::uint64_t              n_documents = 0;
    index_shard                shard;            // view over text and sa

    std::vector<std::vector<token_id>> documents() const;
};

struct history_snapshot {
    std::vector<std::shared_ptr<const history_segment>> segments;  // oldest first
    std::vector<index_shard>                            shards;    // segments[i]->shard, for searching
    std::uint64_t                                       n_tokens    = 0;
    std::uint64_t                                       n_documents = 0;
    std::uint64_t                                       version     = 0;  // increases with every change
};

class history_store {
  public:
    explicit history_store(history_store_params params = {});
    ~history_store();
    history_store(const history_store &) = delete;
    history_store & operator=(const history_store &) = delete;

    // Adds one document (a finished generation). Empty documents are ignored. Negative tokens are invalid
    // (std::invalid_argument). Cost: suffix-sorting the document, plus amortized O(log) re-sorting by merges.
    void add(std::span<const token_id> document);

    std::shared_ptr<const history_snapshot> snapshot() const;

    std::uint64_t n_tokens() const;
    std::uint64_t n_documents() const;
    const history_store_params & params() const { return params_; }

    void clear();

    // Writes every document, oldest first, atomically (temp file, fsync, rename). Throws user_error on I/O errors.
    void save(const std::string & path) const;
    // Replaces the contents with the documents saved at path (then applies this store's bound). Throws
    // user_error naming the path for a missing, truncated or corrupt file, a wrong magic, a future version or a
    // fingerprint that differs from params.fingerprint (when both are non-zero).
    void load(const std::string & path);

  private:
    void publish(std::vector<std::shared_ptr<const history_segment>> segments);  // requires write_mutex_

    history_store_params                    params_;
    mutable std::mutex                      write_mutex_;  // serializes writers (held while sorting)
    mutable std::mutex                      snap_mutex_;   // guards snap_ (held only to copy or swap a pointer)
    std::shared_ptr<const history_snapshot> snap_;
};

}  // namespace rest
