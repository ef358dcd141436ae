// Test helper: a copy of an index file as an older format version wrote it (version 1: no bigram tables; version 2:
// no sample tables), to check that such files are still read. Same sections at the same offsets; the shard table is
// rewritten in that version's records and the file ends after it (the newer sections stay as unreferenced bytes).
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

inline void write_version_copy(const std::string & from, const std::string & to, std::uint32_t version) {
    namespace fmt = rest::index_format;
    std::ifstream             in(from, std::ios::binary);
    std::vector<std::uint8_t> f{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    fmt::file_header          hd;
    if (f.size() < fmt::k_header_bytes) throw std::runtime_error("not an index: " + from);
    std::memcpy(&hd, f.data(), sizeof hd);
    if (hd.version != fmt::k_version) throw std::runtime_error("expected a current-version index: " + from);
    const auto          table = fmt::decode_shard_table(f.data() + hd.table_offset, hd.version, hd.n_shards);
    const std::uint64_t v1    = fmt::shard_entry_bytes(version);
    f.resize(hd.table_offset + table.size() * v1);
    for (std::size_t i = 0; i < table.size(); ++i) std::memcpy(f.data() + hd.table_offset + i * v1, &table[i], v1);
    hd.version         = version;
    hd.file_bytes      = f.size();
    hd.table_checksum  = XXH3_64bits(f.data() + hd.table_offset, table.size() * v1);
    hd.header_checksum = XXH3_64bits(&hd, offsetof(fmt::file_header, header_checksum));
    std::memcpy(f.data(), &hd, sizeof hd);
    std::ofstream(to, std::ios::binary).write(reinterpret_cast<const char *>(f.data()), (std::streamsize) f.size());
}

inline void write_version1_copy(const std::string & from, const std::string & to) { write_version_copy(from, to, 1); }

}  // namespace rest_test
