// The online store's file format (history_store::save / load), shared with the tests that forge such files.
#pragma once

#include <cstdint>

namespace rest::history_file {

constexpr char          k_magic[8] = {'R', 'E', 'S', 'T', 'H', 'I', 'S', 'T'};
constexpr std::uint32_t k_version  = 1;

// On-disk layout (little-endian): this header, then per document a u32 length and that many u32 tokens.
struct header {
    char          magic[8];
    std::uint32_t version;
    std::uint32_t header_bytes;
    std::uint64_t fingerprint;
    std::uint64_t n_documents;
    std::uint64_t n_tokens;
    std::uint64_t payload_bytes;
    std::uint64_t payload_checksum;  // XXH3-64 of the payload
    std::uint64_t header_checksum;   // XXH3-64 of the bytes above
};
static_assert(sizeof(header) == 64);

}  // namespace rest::history_file
