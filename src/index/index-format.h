// On-disk layout of a datastore file: format version 3 (versions 1 and 2, without bigram tables or suffix samples,
// are still read).
// Private to src/index: the builder writes it, the reader maps it. All integers are little-endian (static_assert
// below); the file is only ever mmapped on the machine kind that wrote it or one of the same endianness.
//
//   offset 0      file_header (one 4096-byte page; its own xxh3 checksum covers everything before the checksum)
//   per shard     text section     n_text tokens of token_width bytes, documents separated by the width's max value
//                 sa section       n_sa u32 ranks: suffixes starting with a real token, in token order
//                 bucket section   n_buckets u32: bucket[t] = first rank whose first token is >= t
//                                  (n_buckets = n_vocab + 1, or 0 for vocabularies past 2^22 tokens)
//                 bigram section   (version 2, optional: n_bigrams > 0) first[n_buckets] u32, then key[n_bigrams]
//                                  and start[n_bigrams] u32: the runs of equal second tokens in each first token's
//                                  bucket (index_shard::build_bigrams() computes the same at open for a file
//                                  without it)
//                 sample section   (version 3, optional: n_samples > 0) the first k_sample_tokens tokens of the
//                                  suffix at every k_sample_step-th rank, as the text stores them (a separator past
//                                  a document's or the text's end): n_samples = ceil(n_sa / k_sample_step) rows
//   at the end    shard table      n_shards shard_entry records (120 bytes each; 96 in version 2, which ends them at
//                                  bigram_checksum; 72 in version 1, at n_documents)
// Every section starts on a 4096-byte boundary, so mapped arrays are aligned and page-granular.
//
// Open reads the header and the shard table only (O(n_shards)); verify() hashes every section.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace rest::index_format {

static_assert(std::endian::native == std::endian::little, "the datastore format is little-endian");

inline constexpr char          k_magic[8]        = {'R', 'E', 'S', 'T', 'I', 'D', 'X', '\0'};
inline constexpr std::uint32_t k_version         = 3;
inline constexpr std::uint64_t k_header_bytes    = 4096;
inline constexpr std::uint64_t k_section_align   = 4096;
inline constexpr std::size_t   k_description_max = 256;

struct file_header {
    char          magic[8];
    std::uint32_t version;
    std::uint32_t header_bytes;           // k_header_bytes
    std::uint64_t file_bytes;             // total size: a shorter file is truncated
    std::uint64_t tokenizer_fingerprint;
    std::uint32_t token_width;            // 2 or 4
    std::uint32_t n_shards;
    std::int64_t  n_vocab;                // tokens are < n_vocab; sizes the bucket tables
    std::uint64_t n_documents;
    std::uint64_t n_tokens;               // separators excluded
    std::uint64_t table_offset;           // shard table
    std::uint64_t table_checksum;         // xxh3 of the shard table
    char          tokenizer_description[k_description_max];  // NUL-terminated
    std::uint64_t header_checksum;        // xxh3 of this struct's bytes before this field
};

struct shard_entry {
    std::uint64_t text_offset;
    std::uint64_t n_text;                 // tokens, separators included (< 2^32)
    std::uint64_t text_checksum;
    std::uint64_t sa_offset;
    std::uint64_t n_sa;                   // ranks: one per real token
    std::uint64_t sa_checksum;
    std::uint64_t bucket_offset;
    std::uint64_t bucket_checksum;        // bucket table has n_buckets_for(n_vocab) u32 entries
    std::uint64_t n_documents;
    // Version 2: the bigram section (0 entries: none; its offset and checksum are then 0).
    std::uint64_t bigram_offset;
    std::uint64_t n_bigrams;
    std::uint64_t bigram_checksum;        // xxh3 of the whole section
    // Version 3: the sample section (0 rows: none; its offset and checksum are then 0).
    std::uint64_t sample_offset;
    std::uint64_t n_samples;
    std::uint64_t sample_checksum;
};

static_assert(sizeof(file_header) <= k_header_bytes);
static_assert(sizeof(shard_entry) == 15 * 8);

// Bytes of one shard-table record in a file of this version (version 2 records end at bigram_checksum, version 1
// records at n_documents).
inline constexpr std::uint64_t shard_entry_bytes(std::uint32_t version) {
    return version >= 3 ? sizeof(shard_entry) : version == 2 ? 12 * 8 : 9 * 8;
}

// The shard table's records as this version reads them (older records get no bigram or sample section). `table` points
// at n records of shard_entry_bytes(version) each.
inline std::vector<shard_entry> decode_shard_table(const std::uint8_t * table, std::uint32_t version, std::uint32_t n) {
    std::vector<shard_entry> out(n);
    const std::uint64_t      bytes = shard_entry_bytes(version);
    for (std::uint32_t i = 0; i < n; ++i) {
        std::memset(&out[i], 0, sizeof(shard_entry));
        std::memcpy(&out[i], table + i * bytes, bytes);
    }
    return out;
}

// Bytes of a bigram section of n entries.
inline constexpr std::uint64_t bigram_bytes(std::uint64_t n_buckets, std::uint64_t n_bigrams) {
    return (n_buckets + 2 * n_bigrams) * 4;
}

// Suffix samples: a search over a large range compares a pattern with these rows, contiguous and read without a
// suffix-array entry, and reads the suffix array and the text only within the k_sample_step ranks between two rows
// (on a 600M-token index a length search's probes were a cache and TLB miss each). 0.25 B/token with 2-byte tokens.
inline constexpr std::uint64_t k_sample_step   = 64;
inline constexpr std::uint64_t k_sample_tokens = 8;
inline constexpr std::uint64_t n_samples_for(std::uint64_t n_sa) { return (n_sa + k_sample_step - 1) / k_sample_step; }
inline constexpr std::uint64_t sample_bytes(std::uint64_t n_samples, std::uint64_t token_width) {
    return n_samples * k_sample_tokens * token_width;
}

// First-token tables cost 4 bytes per vocabulary entry per shard; past 2^22 entries (no real tokenizer) they are
// left out and the first narrowing step binary-searches like the others.
inline constexpr std::uint64_t n_buckets_for(std::int64_t n_vocab) {
    return n_vocab <= (std::int64_t(1) << 22) ? static_cast<std::uint64_t>(n_vocab) + 1 : 0;
}

inline constexpr std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace rest::index_format
