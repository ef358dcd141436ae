// A read-only view of one datastore shard: the token array and its suffix array.
//
// Layout (both arrays are usually memory-mapped; the view owns neither and must not outlive them):
//   text[0..n-1]  tokens, u16 or u32. Documents are separated by the width's maximum value (0xFFFF /
//                 0xFFFFFFFF), which no real token uses (u16 is chosen only when n_vocab < 65535). The separator
//                 sorts after every token, so no pattern match and no continuation crosses a document boundary.
//   sa[0..m-1]    u32 suffix array: text positions in lexicographic (token-id) order of their suffixes. Usually
//                 m == n; a datastore drops the suffixes that start with a separator (they sort last and no real
//                 pattern matches them), so there m == n - separators.
//   buckets       optional first-token table (n_vocab + 1 u32): [buckets[t], buckets[t+1]) are the ranks of the
//                 suffixes starting with token t, so the first narrowing step is O(1).
//
// narrow() is O(log n) per pattern token, find() O(log n) probes per pattern; both touch only the pages they read.
// With the index file's suffix samples (format version 3: the first tokens of every 64th suffix, below), find() over
// a large range searches the contiguous rows first, and reads the suffix array and text there only for a row that
// agrees with all its tokens (a longer pattern) or holds a separator, then in the ranks between two rows: that saves
// most of the binary search's cold probes (each a cache and TLB miss).
#pragma once

#include "rest/types.h"

#include <cstdint>
#include <memory>
#include <span>
#include <stop_token>

namespace rest {

// Half-open interval [lo, hi) of suffix-array ranks. All suffixes in it share a common prefix.
struct sa_range {
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;

    std::uint64_t size() const { return hi - lo; }
    bool empty() const { return hi <= lo; }
    bool operator==(const sa_range &) const = default;
};

class index_shard {
  public:
    index_shard() = default;
    // width is 2 or 4 (bytes per token). text and sa must hold n entries each.
    index_shard(const void * text, const std::uint32_t * sa, std::uint64_t n, int width);
    // text holds n_text tokens, sa holds n_sa <= n_text ranks (see the layout above).
    index_shard(const void * text, std::uint64_t n_text, const std::uint32_t * sa, std::uint64_t n_sa, int width);

    // Installs the first-token table (must outlive the shard; n_buckets = n_vocab + 1, buckets[n_vocab] == n_sa).
    void set_first_token_buckets(const std::uint32_t * buckets, std::uint64_t n_buckets);

    std::uint64_t n_tokens() const { return n_; }      // separators included
    std::uint64_t n_suffixes() const { return n_sa_; }  // suffix-array entries
    int width() const { return width_; }

    // Token at text position pos; k_doc_end for a separator or pos >= n.
    token_id token_at(std::uint64_t pos) const {
#ifndef REST_INDEX_UNCHECKED  // bench-index-lookup-unchecked only: what this bound costs (issue 20's <= 2%)
        if (pos >= n_) {
            return k_doc_end;
        }
#endif
        return token_in(pos);
    }

    // token_at() for a position known to lie in the text (pos < n_tokens()): no bound check. For loops that check
    // their whole span once (find()'s comparisons: a pattern's length past a suffix's start) instead of once per
    // token.
    token_id token_in(std::uint64_t pos) const { return stored_token(text_, pos); }

    // Sort key of the text at pos, as suffixes are ordered: running off the text sorts first (a shorter suffix
    // precedes its extensions), a separator after every token. The one definition the searches share.
    std::uint64_t key_at(std::uint64_t pos) const {
#ifndef REST_INDEX_UNCHECKED  // bench-index-lookup-unchecked only (see token_at)
        if (pos >= n_) {
            return 0;
        }
#endif
        return key_in(pos);
    }
    // key_at() for a position known to lie in the text (as token_in()).
    std::uint64_t key_in(std::uint64_t pos) const {
        const token_id t = token_in(pos);
        return t == k_doc_end ? UINT64_MAX : static_cast<std::uint64_t>(t) + 1;
    }

    std::uint64_t suffix(std::uint64_t rank) const { return sa_[rank]; }

    // Suffix samples (the index file's sample section, format version 3): the first sample_tokens() tokens of the
    // suffix at every sample_step()-th rank, in a contiguous table, so that a search over a large range reads the
    // suffix array and text only for rows its tokens do not decide, and in the ranks between two rows. 0 rows: none.
    std::uint64_t n_sample_rows() const { return n_sample_rows_; }
    static constexpr std::uint64_t sample_step() { return 64; }
    static constexpr std::size_t   sample_tokens() { return 8; }
    // Sort key (as key_at()) of token d < sample_tokens() of the suffix at rank j * sample_step(), j <
    // n_sample_rows(); UINT64_MAX (a separator's) also where the suffix's text ends, so a row with one compares by
    // the text instead.
    std::uint64_t sample_row_key(std::uint64_t j, std::size_t d) const {
        const token_id t = stored_token(sample_rows_, j * sample_tokens() + d);
        return t == k_doc_end ? UINT64_MAX : static_cast<std::uint64_t>(t) + 1;
    }
    // Whether find() over r, whose suffixes share `depth` tokens, goes by the sample rows: r is large, the rows hold
    // a token past its shared ones, and the table covers every rank of r (the datastore checks its size at open).
    bool rows_cover(sa_range r, std::size_t depth) const {
        return depth < sample_tokens() && r.size() >= 4 * sample_step() &&
               (r.hi + sample_step() - 1) / sample_step() <= n_sample_rows_;
    }
    // Installs a sample table read from the index file (n_rows must be ceil(n_sa / sample_step()): the datastore
    // checks it at open; the rows' values are only compared, so wrong ones give wrong ranges, never a bad read).
    void set_sample_table(const void * rows, std::uint64_t n_rows) {
        sample_rows_   = n_rows > 0 ? rows : nullptr;
        n_sample_rows_ = sample_rows_ ? n_rows : 0;
    }

    // Token at offset `depth` of the suffix with this rank (k_doc_end past a document's end).
    token_id next_token(std::uint64_t rank, std::uint32_t depth) const { return token_at(sa_[rank] + depth); }

    sa_range full() const { return {0, n_sa_}; }

    // Copies the tokens from text position pos on into out, stopping at the end of the document (or of out).
    // Returns how many were copied. O(returned count).
    std::size_t read(std::uint64_t pos, std::span<token_id> out) const;

    // Precondition: every suffix in r shares its first `depth` tokens, none of them a separator. Returns the
    // sub-range whose token at `depth` equals t (t must be a real token, not k_doc_end). O(log |r|).
    sa_range narrow(sa_range r, std::uint32_t depth, token_id t) const;

    // The range of suffixes that start with `pattern` (empty when it does not occur). An empty pattern gives full().
    sa_range find(std::span<const token_id> pattern) const;
    // Sub-range of r whose suffixes start with `pattern`. Precondition: every suffix in r shares pattern[0..depth)
    // (which is not read: only pattern[depth..] is compared).
    // Compares whole patterns per probe (one random access per probe instead of one binary search per token):
    // O(log |r|) probes, or over the sample rows where r spans several, plus the galloping to the upper end,
    // O(log |result|). A negative pattern token (k_doc_end) never matches.
    sa_range find(sa_range r, std::size_t depth, std::span<const token_id> pattern) const;

    // The range of the suffixes that start with t0 t1, from the bigram table when the shard has one (true; O(log) in
    // a small array): read from the file (format version 2) or once build_bigrams() has finished; else false (not
    // built yet, or no first-token table).
    bool bigram_range(token_id t0, token_id t1, sa_range & out) const;
    // Whether bigram_range() has a table now (from the file, or built).
    bool has_bigram_table() const;

    // Builds the bigram table: for every first token, the first rank of each second token after it (one entry per
    // distinct bigram, 8 bytes each). One pass over the suffix array, a text read per suffix, so seconds per 100M
    // tokens: the builder writes it into the index file, and for a file without one (format version 1) a
    // background thread runs this after open (datastore.h). It stops once `stop` is requested (checked every 4,096
    // suffixes), leaving no table; so does a table past bigram_cap() runs (a corrupt suffix array). Nothing to do
    // when a table is installed.
    // Safe to call from several threads (one builds, the others wait).
    void build_bigrams(std::stop_token stop) const;
    // Installs a bigram table read from the index file (index-format.h's bigram section of n_runs runs; it must
    // outlive the shard, and its `first` offsets must be monotone up to n_runs: the datastore checks them at open).
    // Lookups bound every rank it gives to its first token's bucket. Call before sharing the view across threads.
    void set_bigram_table(const std::uint32_t * section, std::uint64_t n_runs);

    // Sub-range of r (with its common prefix of length `depth`) whose token at `depth` equals the token at rank
    // `rank`, which must lie in r: the "run" a child occupies. O(log |r|) by galloping from rank.
    sa_range run_at(sa_range r, std::uint32_t depth, std::uint64_t rank) const;

  private:
    // Token i of an array stored as the text is (width() bytes each, the width's largest value a separator).
    token_id stored_token(const void * base, std::uint64_t i) const {
        if (width_ == 2) {
            const std::uint16_t v = static_cast<const std::uint16_t *>(base)[i];
            return v == 0xFFFFu ? k_doc_end : static_cast<token_id>(v);
        }
        const std::uint32_t v = static_cast<const std::uint32_t *>(base)[i];
        return v == 0xFFFFFFFFu ? k_doc_end : static_cast<token_id>(v);
    }

    struct bigrams;                     // the bigram table, shared by copies of the view
    std::shared_ptr<bigrams> bigrams_;

    const void *          text_      = nullptr;
    const std::uint32_t * sa_        = nullptr;
    const std::uint32_t * buckets_   = nullptr;
    std::uint64_t         n_buckets_ = 0;
    std::uint64_t         n_         = 0;
    std::uint64_t         n_sa_      = 0;
    int                   width_     = 2;
    const void *          sample_rows_   = nullptr;
    std::uint64_t         n_sample_rows_ = 0;
};

}  // namespace rest
