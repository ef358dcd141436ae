#include "rest/datastore.h"

#include "index-file.h"
#include "index-format.h"
#include "suffix-sort.h"

#include <xxhash.h>

#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace rest {

namespace fmt = index_format;

namespace {

std::string hex64(std::uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, v);
    return buf;
}

std::string printable_magic(const std::uint8_t * p) {
    std::string s;
    for (int i = 0; i < 8; ++i) {
        const unsigned char c = p[i];
        if (c >= 0x20 && c < 0x7F) {
            s += static_cast<char>(c);
        } else {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            s += buf;
        }
    }
    return s;
}

class mmap_datastore final : public datastore {
  public:
    mmap_datastore(const std::string & path, std::uint64_t expected_fp, const std::string & expected_desc,
                   access how) :
        path_(path), map_(path) {
        const std::uint8_t * base = map_.data();
        const std::uint64_t  size = map_.size();
        if (size >= sizeof(fmt::k_magic) && std::memcmp(base, fmt::k_magic, sizeof(fmt::k_magic)) != 0) {
            fail("is not a rest index (magic '" + printable_magic(base) + "' at offset 0, expected 'RESTIDX\\x00')");
        }
        if (size < fmt::k_header_bytes) {
            fail("is truncated: " + std::to_string(size) + " bytes, shorter than its " +
                 std::to_string(fmt::k_header_bytes) + "-byte header");
        }
        std::memcpy(&hd_, base, sizeof(hd_));
        if (hd_.version > fmt::k_version) {
            fail("has format version " + std::to_string(hd_.version) + ", newer than this rest.cpp reads (" +
                 std::to_string(fmt::k_version) + "); upgrade rest.cpp or rebuild the index");
        }
        if (hd_.version == 0) {
            fail("has format version 0 at offset 8 (corrupt header)");
        }
        const std::uint64_t sum = XXH3_64bits(&hd_, offsetof(fmt::file_header, header_checksum));
        if (sum != hd_.header_checksum) {
            fail("has a corrupt header: checksum " + hex64(sum) + ", expected " + hex64(hd_.header_checksum));
        }
        if (size < hd_.file_bytes) {
            fail("is truncated: " + std::to_string(size) + " bytes, the header says " +
                 std::to_string(hd_.file_bytes));
        }
        if (size > hd_.file_bytes) {
            fail("has " + std::to_string(size - hd_.file_bytes) + " bytes past its end at offset " +
                 std::to_string(hd_.file_bytes));
        }
        if (hd_.header_bytes != fmt::k_header_bytes || (hd_.token_width != 2 && hd_.token_width != 4) ||
            hd_.n_vocab <= 0 || hd_.n_vocab > INT32_MAX ||
            token_width_for(hd_.n_vocab) != static_cast<int>(hd_.token_width) || hd_.n_shards == 0) {
            fail("has an inconsistent header (token width " + std::to_string(hd_.token_width) + ", vocabulary " +
                 std::to_string(hd_.n_vocab) + ", shards " + std::to_string(hd_.n_shards) + ")");
        }
        hd_.tokenizer_description[fmt::k_description_max - 1] = '\0';
        n_buckets_ = fmt::n_buckets_for(hd_.n_vocab);
        const std::uint64_t table_bytes = std::uint64_t(hd_.n_shards) * fmt::shard_entry_bytes(hd_.version);
        check_range("shard table", hd_.table_offset, table_bytes);
        const std::uint64_t tsum = XXH3_64bits(base + hd_.table_offset, table_bytes);
        table_ = fmt::decode_shard_table(base + hd_.table_offset, hd_.version, hd_.n_shards);
        if (tsum != hd_.table_checksum) {
            fail("has a corrupt shard table at offset " + std::to_string(hd_.table_offset) + ": checksum " +
                 hex64(tsum) + ", expected " + hex64(hd_.table_checksum));
        }

        std::uint64_t n_sa_total = 0, n_docs_total = 0;
        for (std::size_t i = 0; i < table_.size(); ++i) {
            const fmt::shard_entry & e = table_[i];
            const std::string        s = "shard " + std::to_string(i) + " ";
            if (e.n_text == 0 || e.n_text > UINT32_MAX || e.n_sa > e.n_text) {
                fail("has an inconsistent " + s + "(" + std::to_string(e.n_text) + " tokens, " +
                     std::to_string(e.n_sa) + " suffixes)");
            }
            check_range(s + "text", e.text_offset, e.n_text * hd_.token_width);
            check_range(s + "suffix array", e.sa_offset, e.n_sa * 4);
            check_range(s + "first-token table", e.bucket_offset, n_buckets_ * 4);
            const auto * buckets = reinterpret_cast<const std::uint32_t *>(base + e.bucket_offset);
            // Lookups index the suffix array with these ranks: a table that is not monotone up to n_sa would send
            // them out of bounds. O(vocabulary) per shard, independent of the index's size.
            check_buckets(s, buckets, e.n_sa);
            shards_.emplace_back(base + e.text_offset, e.n_text,
                                 reinterpret_cast<const std::uint32_t *>(base + e.sa_offset), e.n_sa,
                                 static_cast<int>(hd_.token_width));
            // Checked whatever the vocabulary: verify() hashes the section too.
            const std::uint32_t * bigrams = e.n_bigrams > 0 ? bigram_section(s, e) : nullptr;
            if (e.n_samples > 0) shards_.back().set_sample_table(sample_section(s, e), e.n_samples);
            if (n_buckets_ > 0) {
                shards_.back().set_first_token_buckets(buckets, n_buckets_);
                shards_.back().set_bigram_table(bigrams, e.n_bigrams);
            }
            n_sa_total += e.n_sa;
            n_docs_total += e.n_documents;
        }
        if (n_sa_total != hd_.n_tokens || n_docs_total < hd_.n_documents) {
            fail("has shards that disagree with the header (" + std::to_string(n_sa_total) + " tokens in shards, " +
                 std::to_string(hd_.n_tokens) + " in the header)");
        }
        // Every check passed: map the pages in behind the caller's back (from 1 MiB; see page_prefetcher).
        if (how == access::lookups) {
            // The shards' first-token, bigram and sample tables are mapped first: lookups read them, and they sit at
            // the end of each shard (mapped last otherwise, in a fresh process's first 0.1 s on a 3.6 GB index).
            // Then, on the same thread, the bigram table of each shard whose file has none (format version 1): a
            // bigram's first search becomes a lookup in memory instead of a binary search with a cache and TLB miss
            // per round. (Built here, a 600M-token shard's took 6 s of this thread, and the draft steps of those
            // seconds ran at p99 172-198 us against 64-78 after.) The thread holds copies of the views (they share
            // the tables) and is joined before the mapping goes.
            std::vector<std::pair<std::uint64_t, std::uint64_t>> tables;
            for (const fmt::shard_entry & e : table_) {
                if (n_buckets_ > 0) tables.emplace_back(e.bucket_offset, n_buckets_ * 4);
                if (e.n_bigrams > 0) tables.emplace_back(e.bigram_offset, fmt::bigram_bytes(n_buckets_, e.n_bigrams));
                if (e.n_samples > 0) tables.emplace_back(e.sample_offset, fmt::sample_bytes(e.n_samples, hd_.token_width));
            }
            prefetch_.start(
                base, size,
                [shards = shards_](std::stop_token stop) {
                    for (const index_shard & s : shards) {
                        s.build_bigrams(stop);
                    }
                },
                std::move(tables));
        }

        info_.format_version        = hd_.version;
        info_.tokenizer_fingerprint = hd_.tokenizer_fingerprint;
        info_.tokenizer_description = hd_.tokenizer_description;
        info_.token_width           = static_cast<int>(hd_.token_width);
        info_.n_vocab               = hd_.n_vocab;
        info_.n_documents           = hd_.n_documents;
        info_.n_tokens              = hd_.n_tokens;
        info_.n_bytes               = size;
        info_.n_shards              = shards_.size();

        if (expected_fp != 0 && expected_fp != hd_.tokenizer_fingerprint) {
            throw user_error("index '" + path_ + "' was built with tokenizer '" + info_.tokenizer_description +
                             "' (fingerprint " + hex64(hd_.tokenizer_fingerprint) + ") but the model's tokenizer is '" +
                             (expected_desc.empty() ? std::string("?") : expected_desc) + "' (fingerprint " +
                             hex64(expected_fp) + "); rebuild the index with this model");
        }
    }

    const datastore_info & info() const override { return info_; }

    std::span<const index_shard> shards() const override { return shards_; }

    void verify() const override {
        const std::uint8_t * base = map_.data();
        for (std::size_t i = 0; i < table_.size(); ++i) {
            const fmt::shard_entry & e = table_[i];
            const std::string        s = "shard " + std::to_string(i) + " ";
            check_sum(s + "text", e.text_offset, e.n_text * hd_.token_width, e.text_checksum);
            check_sum(s + "suffix array", e.sa_offset, e.n_sa * 4, e.sa_checksum);
            check_sum(s + "first-token table", e.bucket_offset, n_buckets_ * 4, e.bucket_checksum);
            if (e.n_bigrams > 0) {
                check_sum(s + "bigram table", e.bigram_offset, fmt::bigram_bytes(n_buckets_, e.n_bigrams),
                          e.bigram_checksum);
            }
            if (e.n_samples > 0) {
                check_sum(s + "sample table", e.sample_offset, fmt::sample_bytes(e.n_samples, hd_.token_width),
                          e.sample_checksum);
            }
            // Checksums prove the bytes are the ones written; these prove the writer kept its invariants.
            const auto * sa = reinterpret_cast<const std::uint32_t *>(base + e.sa_offset);
            for (std::uint64_t r = 0; r < e.n_sa; ++r) {
                if (sa[r] >= e.n_text) {
                    fail("has " + s + "suffix-array entry " + std::to_string(r) + " = " + std::to_string(sa[r]) +
                         " past the text's " + std::to_string(e.n_text) + " tokens");
                }
            }
        }
    }

  private:
    [[noreturn]] void fail(const std::string & what) const { throw user_error("index '" + path_ + "' " + what); }

    void check_buckets(const std::string & s, const std::uint32_t * buckets, std::uint64_t n_sa) const {
        if (n_buckets_ > 0) check_offsets(s + "first-token table", buckets, n_sa);
    }

    // A per-token offset table (first-token or bigram): monotone and ending at `end`, so that every slice a lookup
    // takes from it lies inside what it indexes. O(vocabulary).
    void check_offsets(const std::string & what, const std::uint32_t * table, std::uint64_t end) const {
        if (table[n_buckets_ - 1] != end) {
            fail("has an inconsistent " + what + " (ends at " + std::to_string(table[n_buckets_ - 1]) +
                 ", expected " + std::to_string(end) + ")");
        }
        for (std::uint64_t t = 0; t + 1 < n_buckets_; ++t) {
            if (table[t] > table[t + 1]) fail("has " + what + " decreasing at token " + std::to_string(t));
        }
    }

    // A shard's sample table, its framing checked: one row per index_shard::sample_step() ranks, in the file. Its
    // values are only compared, never used to index (index_shard::set_sample_table).
    const void * sample_section(const std::string & s, const fmt::shard_entry & e) const {
        static_assert(fmt::k_sample_step == index_shard::sample_step() && fmt::k_sample_tokens == index_shard::sample_tokens());
        if (e.n_samples != fmt::n_samples_for(e.n_sa)) {
            fail("has an inconsistent " + s + "sample table (" + std::to_string(e.n_samples) + " rows for " +
                 std::to_string(e.n_sa) + " suffixes)");
        }
        check_range(s + "sample table", e.sample_offset, fmt::sample_bytes(e.n_samples, hd_.token_width));
        return map_.data() + e.sample_offset;
    }

    // A shard's bigram table, its framing checked: in the file, and its run offsets (check_offsets). The runs'
    // contents are bounded where they are read (index_shard::bigram_range).
    const std::uint32_t * bigram_section(const std::string & s, const fmt::shard_entry & e) const {
        if (n_buckets_ == 0) {
            fail("has a " + s + "bigram table without a first-token table (a " + std::to_string(hd_.n_vocab) +
                 "-token vocabulary)");
        }
        if (e.n_bigrams > e.n_sa) {
            fail("has an inconsistent " + s + "bigram table (" + std::to_string(e.n_bigrams) + " runs, " +
                 std::to_string(e.n_sa) + " suffixes)");
        }
        check_range(s + "bigram table", e.bigram_offset, fmt::bigram_bytes(n_buckets_, e.n_bigrams));
        const auto * first = reinterpret_cast<const std::uint32_t *>(map_.data() + e.bigram_offset);
        check_offsets(s + "bigram table", first, e.n_bigrams);
        return first;
    }

    void check_range(const std::string & what, std::uint64_t offset, std::uint64_t bytes) const {
        const std::uint64_t size = map_.size();
        if (offset % 4 != 0 || offset < fmt::k_header_bytes || offset > size || bytes > size - offset) {
            fail("is truncated or corrupt: " + what + " spans bytes " + std::to_string(offset) + ".." +
                 std::to_string(offset + bytes) + " of a " + std::to_string(size) + "-byte file");
        }
    }

    void check_sum(const std::string & what, std::uint64_t offset, std::uint64_t bytes, std::uint64_t expected) const {
        const std::uint64_t got = XXH3_64bits(map_.data() + offset, bytes);
        if (got != expected) {
            fail("fails verification: " + what + " (bytes " + std::to_string(offset) + ".." +
                 std::to_string(offset + bytes) + ") has checksum " + hex64(got) + ", expected " + hex64(expected));
        }
    }

    std::string                   path_;
    file_mapping                  map_;
    page_prefetcher               prefetch_;  // after map_: stopped and joined before the mapping goes
    fmt::file_header              hd_{};
    std::uint64_t                 n_buckets_ = 0;  // per shard
    std::vector<fmt::shard_entry> table_;
    std::vector<index_shard>      shards_;
    datastore_info                info_;
};

// Several files as one: lookups already span shards, so the union is the concatenation of the shard lists.
class multi_datastore final : public datastore {
  public:
    multi_datastore(std::vector<std::shared_ptr<const datastore>> parts, const std::vector<std::string> & paths) :
        parts_(std::move(parts)) {
        info_ = parts_[0]->info();
        info_.n_documents = info_.n_tokens = info_.n_bytes = info_.n_shards = 0;
        for (std::size_t i = 0; i < parts_.size(); ++i) {
            const auto & pi = parts_[i]->info();
            if (pi.tokenizer_fingerprint != info_.tokenizer_fingerprint) {
                throw user_error("index '" + paths[i] + "' was built with tokenizer '" + pi.tokenizer_description +
                                 "', index '" + paths[0] + "' with '" + info_.tokenizer_description +
                                 "': indexes used together must share one");
            }
            info_.n_documents += pi.n_documents;
            info_.n_tokens += pi.n_tokens;
            info_.n_bytes += pi.n_bytes;
            info_.n_shards += pi.n_shards;
            const auto s = parts_[i]->shards();
            shards_.insert(shards_.end(), s.begin(), s.end());  // views sharing the parts' mappings and samples
        }
    }

    const datastore_info &       info() const override { return info_; }
    std::span<const index_shard> shards() const override { return shards_; }
    void                         verify() const override {
        for (const auto & p : parts_) p->verify();
    }

  private:
    std::vector<std::shared_ptr<const datastore>> parts_;
    std::vector<index_shard>                      shards_;
    datastore_info                          info_;
};

}  // namespace

std::unique_ptr<datastore> datastore::open(const std::string & path, std::uint64_t expected_fingerprint,
                                           const std::string & expected_description, access how) {
    return std::make_unique<mmap_datastore>(path, expected_fingerprint, expected_description, how);
}

std::unique_ptr<datastore> datastore::open(const std::vector<std::string> & paths, std::uint64_t expected_fingerprint,
                                           const std::string & expected_description) {
    if (paths.size() == 1) {
        return open(paths[0], expected_fingerprint, expected_description);
    }
    if (paths.empty()) {
        throw user_error("no index given");
    }
    for (std::size_t i = 0; i < paths.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            std::error_code e1;
            if (paths[i] == paths[j] || std::filesystem::equivalent(paths[i], paths[j], e1)) {
                throw user_error("index '" + paths[i] + "' is given twice (its counts would count double)");
            }
        }
    }
    std::vector<std::shared_ptr<const datastore>> parts;
    for (const auto & p : paths) parts.push_back(open(p, expected_fingerprint, expected_description));
    return std::make_unique<multi_datastore>(std::move(parts), paths);
}

std::shared_ptr<const datastore> datastore::combine(std::vector<std::shared_ptr<const datastore>> parts,
                                                    const std::vector<std::string> & names) {
    if (parts.size() == 1) return parts[0];
    if (parts.empty()) return nullptr;
    return std::make_shared<multi_datastore>(std::move(parts), names);
}

}  // namespace rest
