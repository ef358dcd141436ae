// Test helper: a copy of an index file as format version 1 wrote it (no bigram tables), to check that such files
// are still read. Same sections at the same offsets; the shard table is rewritten in version 1 records and the file
// ends after it (the bigram sections stay as unreferenced bytes).
#pragma once

#include "index/index-format.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace rest_test {

inline void write_version1_copy(const std::string & from, const std::string & to) {
    namespace fmt = rest::index_format;
    std::ifstream             in(from, std::ios::binary);
    std::vector<std::uint8_t> f{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    fmt::file_header          hd;
    if (f.size() < fmt::k_header_bytes) throw std::runtime_error("not an index: " + from);
    std::memcpy(&hd, f.data(), sizeof hd);
    if (hd.version != 2) throw std::runtime_error("expected a version 2 index: " + from);
    const auto          table = fmt::decode_shard_table(f.data() + hd.table_offset, hd.version, hd.n_shards);
    const std::uint64_t v1    = fmt::shard_entry_bytes(1);
    f.resize(hd.table_offset + table.size() * v1);
    for (std::size_t i = 0; i < table.size(); ++i) std::memcpy(f.data() + hd.table_offset + i * v1, &table[i], v1);
    hd.version         = 1;
    hd.file_bytes      = f.size();
    hd.table_checksum  = XXH3_64bits(f.data() + hd.table_offset, table.size() * v1);
    hd.header_checksum = XXH3_64bits(&hd, offsetof(fmt::file_header, header_checksum));
    std::memcpy(f.data(), &hd, sizeof hd);
    std::ofstream(to, std::ios::binary).write(reinterpret_cast<const char *>(f.data()), (std::streamsize) f.size());
}

}  // namespace rest_test
