// The datastore file: round trip of counts, atomic writes, and every kind of bad file as a one-line user_error.
#include "index/index-format.h"
#include "index-version1.h"  // XXH3_64bits, inline
#include "rest/datastore.h"
#include "rest/index-builder.h"
#include "test-util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>

namespace {

namespace fs = std::filesystem;
using rest::token_id;

rest::tokenizer_identity synthetic(std::int32_t n_vocab, std::uint64_t fp = 0xABCDEF) {
    return {fp, "synthetic, " + std::to_string(n_vocab) + " tokens", n_vocab};
}

std::string tmp_path(const std::string & name) {
    return rest_test::tmp_dir() + "/file-" + name;
}

std::vector<std::vector<token_id>> some_docs(std::size_t n, std::uint32_t seed, token_id alphabet = 100) {
    std::mt19937                       rng(seed);
    std::vector<std::vector<token_id>> docs(n);
    for (auto & d : docs) {
        d.resize(1 + rng() % 50);
        for (auto & t : d) {
            t = static_cast<token_id>(rng() % alphabet);
        }
    }
    return docs;
}

std::vector<char> read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string & path, const std::vector<char> & bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs f, expects a user_error whose message is one line and contains every needle.
template <typename F> void expect_user_error(F && f, std::initializer_list<std::string> needles) {
    try {
        f();
        ADD_FAILURE() << "no error thrown";
    } catch (const rest::user_error & e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "multi-line message: " << msg;
        for (const auto & n : needles) {
            EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
        }
    }
}

TEST(index_file, round_trip_counts) {
    for (std::uint64_t shard_tokens : {0ull, 500ull, 64ull}) {
        for (std::int32_t n_vocab : {100, 151936}) {
            auto docs = some_docs(200, 11, 100);
            docs.push_back({});  // empty documents are not counted
            std::uint64_t n_tokens = 0;
            for (const auto & d : docs) {
                n_tokens += d.size();
            }
            const std::string          path = tmp_path("round-trip.idx");
            rest::index_builder_params p;
            p.n_shard_tokens_max = shard_tokens;
            rest::write_datastore(path, docs, synthetic(n_vocab), p);
            const auto   ds   = rest::datastore::open(path, 0xABCDEF, "synthetic");
            const auto & info = ds->info();
            EXPECT_EQ(info.format_version, 3u);
            EXPECT_EQ(info.n_documents, 200u);
            EXPECT_EQ(info.n_tokens, n_tokens);
            EXPECT_EQ(info.token_width, n_vocab < 65535 ? 2 : 4);
            EXPECT_EQ(info.tokenizer_fingerprint, 0xABCDEFu);
            EXPECT_EQ(info.tokenizer_description, "synthetic, " + std::to_string(n_vocab) + " tokens");
            EXPECT_EQ(info.n_bytes, fs::file_size(path));
            EXPECT_EQ(info.n_shards, ds->shards().size());
            if (shard_tokens == 0) {
                EXPECT_EQ(info.n_shards, 1u);
            } else {
                EXPECT_GE(info.n_shards, n_tokens / shard_tokens);
            }
            std::uint64_t n_suffixes = 0;
            for (const auto & s : ds->shards()) {
                n_suffixes += s.n_suffixes();
            }
            EXPECT_EQ(n_suffixes, n_tokens);
            ds->verify();
        }
    }
}

// A document longer than a shard is split; its tokens are all kept.
TEST(index_file, long_document_splits_across_shards) {
    std::vector<std::vector<token_id>> docs = {std::vector<token_id>(1000, 5), {1, 2, 3}};
    const std::string                  path = tmp_path("split.idx");
    rest::index_builder_params         p;
    p.n_shard_tokens_max = 300;
    rest::write_datastore(path, docs, synthetic(10), p);
    const auto ds = rest::datastore::open(path);
    EXPECT_EQ(ds->info().n_tokens, 1003u);
    EXPECT_EQ(ds->info().n_documents, 2u);
    EXPECT_EQ(ds->shards().size(), 4u);
    const std::vector<token_id> five = {5};
    EXPECT_EQ(rest::find_all(*ds, five).count, 1000u);
}

TEST(index_file, empty_corpus_is_an_error_and_leaves_no_file) {
    const std::string path = tmp_path("empty.idx");
    fs::remove(path);
    std::vector<std::vector<token_id>> docs = {{}, {}};
    expect_user_error([&] { rest::write_datastore(path, docs, synthetic(10)); }, {"empty corpus"});
    EXPECT_FALSE(fs::exists(path));
    for (const auto & e : fs::directory_iterator(rest_test::tmp_dir())) {
        EXPECT_EQ(e.path().filename().string().find("file-empty.idx.tmp"), std::string::npos) << e.path();
    }
}

TEST(index_file, bad_tokens_are_rejected) {
    std::vector<std::vector<token_id>> docs = {{1, 2, 10}};
    EXPECT_THROW(rest::write_datastore(tmp_path("bad-token.idx"), docs, synthetic(10)), std::invalid_argument);
    docs = {{1, -1}};
    EXPECT_THROW(rest::write_datastore(tmp_path("bad-token.idx"), docs, synthetic(10)), std::invalid_argument);
}

// An unfinished builder (an interrupted build) leaves nothing under the final name, and an older index under that
// name survives untouched.
TEST(index_file, interrupted_build_keeps_old_index) {
    const std::string path = tmp_path("atomic.idx");
    rest::write_datastore(path, some_docs(10, 1), synthetic(100));
    const auto before = read_all(path);
    std::string temp;
    {
        rest::index_builder b(path, synthetic(100));
        b.add_document(std::vector<token_id>{1, 2, 3});
        temp = b.temp_path();
        EXPECT_TRUE(fs::exists(temp));
    }
    EXPECT_FALSE(fs::exists(temp));
    EXPECT_EQ(read_all(path), before);
}

class index_bad_file : public ::testing::Test {
  protected:
    void SetUp() override {
        good_ = tmp_path("good.idx");
        rest::index_builder_params p;
        p.n_shard_tokens_max = 400;
        rest::write_datastore(good_, some_docs(60, 2), synthetic(100), p);
        bytes_ = read_all(good_);
        bad_   = tmp_path("bad.idx");
    }
    std::string       good_, bad_;
    std::vector<char> bytes_;
};

TEST_F(index_bad_file, missing) {
    expect_user_error([&] { rest::datastore::open(tmp_path("does-not-exist.idx")); },
                      {"does-not-exist.idx", "No such file"});
}

TEST_F(index_bad_file, directory) {
    expect_user_error([&] { rest::datastore::open(rest_test::tmp_dir()); }, {"is a directory"});
}

TEST_F(index_bad_file, empty_file) {
    write_all(bad_, {});
    expect_user_error([&] { rest::datastore::open(bad_); }, {bad_, "truncated", "0 bytes"});
}

TEST_F(index_bad_file, truncated) {
    for (std::size_t keep : {std::size_t(100), std::size_t(4096), bytes_.size() / 2, bytes_.size() - 1}) {
        write_all(bad_, std::vector<char>(bytes_.begin(), bytes_.begin() + keep));
        expect_user_error([&] { rest::datastore::open(bad_); }, {bad_, "truncated"});
    }
}

TEST_F(index_bad_file, wrong_magic) {
    auto b = bytes_;
    std::memcpy(b.data(), "GGUF\x03\0\0\0", 8);
    write_all(bad_, b);
    expect_user_error([&] { rest::datastore::open(bad_); }, {bad_, "not a rest index", "GGUF"});
    write_all(bad_, std::vector<char>{'h', 'e', 'l', 'l', 'o', '\n', 'w', 'o', 'r', 'l', 'd'});
    expect_user_error([&] { rest::datastore::open(bad_); }, {"not a rest index"});
}

TEST_F(index_bad_file, future_version) {
    auto                b       = bytes_;
    const std::uint32_t version = rest::index_format::k_version + 1;
    std::memcpy(b.data() + offsetof(rest::index_format::file_header, version), &version, 4);
    write_all(bad_, b);
    expect_user_error([&] { rest::datastore::open(bad_); },
                      {bad_, "version " + std::to_string(rest::index_format::k_version + 1), "newer"});
}

TEST_F(index_bad_file, corrupt_header) {
    auto b = bytes_;
    b[offsetof(rest::index_format::file_header, n_tokens)] ^= 1;
    write_all(bad_, b);
    expect_user_error([&] { rest::datastore::open(bad_); }, {bad_, "corrupt header"});
}

TEST_F(index_bad_file, trailing_bytes) {
    auto b = bytes_;
    b.push_back('x');
    write_all(bad_, b);
    expect_user_error([&] { rest::datastore::open(bad_); }, {bad_, "past its end"});
}

// One flipped byte anywhere in a section: open() does not read sections, verify() names the bad one.
TEST_F(index_bad_file, flipped_byte_caught_by_verify) {
    rest::index_format::file_header hd;
    std::memcpy(&hd, bytes_.data(), sizeof(hd));
    std::vector<rest::index_format::shard_entry> table(hd.n_shards);
    std::memcpy(table.data(), bytes_.data() + hd.table_offset, table.size() * sizeof(table[0]));
    ASSERT_GE(table.size(), 2u);
    struct spot {
        std::uint64_t offset;
        const char *  section;
    };
    const auto & e = table[1];
    ASSERT_GT(e.n_bigrams, 0u) << "the fixture's shard has a bigram table";
    ASSERT_GT(e.n_samples, 0u) << "the fixture's shard has a sample table";
    const std::uint64_t n_buckets = rest::index_format::n_buckets_for(hd.n_vocab);
    for (const spot s : {spot{e.text_offset + 3, "shard 1 text"}, spot{e.sa_offset + 5, "shard 1 suffix array"},
                         spot{e.sa_offset + e.n_sa * 4 - 1, "shard 1 suffix array"},
                         spot{e.bucket_offset + 11, "shard 1 first-token table"},
                         spot{e.bigram_offset + n_buckets * 4 + 6, "shard 1 bigram table"},
                         spot{e.bigram_offset + (n_buckets + 2 * e.n_bigrams) * 4 - 1, "shard 1 bigram table"},
                         spot{e.sample_offset + 1, "shard 1 sample table"}}) {
        auto b = bytes_;
        b[s.offset] ^= 0x10;
        write_all(bad_, b);
        std::unique_ptr<rest::datastore> ds;
        try {
            ds = rest::datastore::open(bad_);
        } catch (const rest::user_error & err) {
            // A flipped bucket entry can break the table's sum, which open() checks cheaply; also fine.
            EXPECT_NE(std::string(err.what()).find(s.section), std::string::npos) << err.what();
            continue;
        }
        expect_user_error([&] { ds->verify(); }, {bad_, s.section, "checksum"});
    }
    // The shard table and header have checksums checked at open.
    auto b = bytes_;
    b[hd.table_offset + 9] ^= 1;
    write_all(bad_, b);
    expect_user_error([&] { rest::datastore::open(bad_); }, {bad_, "shard table"});
}

// A copy of `bytes` with shard `i`'s table record edited, the table and header re-signed: what only open's own checks
// of the record can catch.
std::vector<char> with_record(const std::vector<char> & bytes, std::size_t i,
                              const std::function<void(rest::index_format::shard_entry &)> & edit) {
    namespace fmt = rest::index_format;
    fmt::file_header hd;
    std::memcpy(&hd, bytes.data(), sizeof(hd));
    auto table = fmt::decode_shard_table(reinterpret_cast<const std::uint8_t *>(bytes.data()) + hd.table_offset,
                                         hd.version, hd.n_shards);
    edit(table.at(i));
    auto b = bytes;
    std::memcpy(b.data() + hd.table_offset, table.data(), table.size() * sizeof(table[0]));
    hd.table_checksum  = XXH3_64bits(table.data(), table.size() * sizeof(table[0]));
    hd.header_checksum = XXH3_64bits(&hd, offsetof(fmt::file_header, header_checksum));
    std::memcpy(b.data(), &hd, sizeof(hd));
    return b;
}

// A sample table's framing is checked at open: a row count other than one per 64 suffixes, or a section past the
// file, gives one line naming it (searches would otherwise read rows past the section).
TEST_F(index_bad_file, sample_table_framing_checked_at_open) {
    namespace fmt = rest::index_format;
    const auto expect_refused = [&](const std::vector<char> & b, std::initializer_list<std::string> needles) {
        write_all(bad_, b);
        expect_user_error([&] { rest::datastore::open(bad_); }, needles);
    };
    expect_refused(with_record(bytes_, 1, [](fmt::shard_entry & r) { r.n_samples -= 1; }),
                   {bad_, "shard 1 sample table", "rows for"});
    expect_refused(with_record(bytes_, 1, [](fmt::shard_entry & r) { r.n_samples = r.n_sa + 1; }),
                   {bad_, "shard 1 sample table", "rows for"});
    expect_refused(with_record(bytes_, 1, [&](fmt::shard_entry & r) { r.sample_offset = bytes_.size() - 8; }),
                   {bad_, "shard 1 sample table", "truncated or corrupt"});
}

// A bigram table's framing is checked at open: a run count past the suffixes, a section past the file, run offsets
// that decrease or do not end at the run count, and a table in a file without first-token tables each give one line
// naming it (lookups would otherwise index past the section).
TEST_F(index_bad_file, bigram_table_framing_checked_at_open) {
    namespace fmt = rest::index_format;
    fmt::file_header hd;
    std::memcpy(&hd, bytes_.data(), sizeof(hd));
    const auto table = fmt::decode_shard_table(reinterpret_cast<const std::uint8_t *>(bytes_.data()) + hd.table_offset,
                                               hd.version, hd.n_shards);
    const fmt::shard_entry e = table.at(1);
    ASSERT_GT(e.n_bigrams, 1u);
    const auto expect_refused = [&](const std::vector<char> & b, std::initializer_list<std::string> needles) {
        write_all(bad_, b);
        expect_user_error([&] { rest::datastore::open(bad_); }, needles);
    };
    expect_refused(with_record(bytes_, 1, [](fmt::shard_entry & r) { r.n_bigrams = r.n_sa + 1; }),
                   {bad_, "shard 1 bigram table", "runs"});
    expect_refused(with_record(bytes_, 1, [&](fmt::shard_entry & r) { r.bigram_offset = bytes_.size() - 8; }),
                   {bad_, "shard 1 bigram table", "truncated or corrupt"});
    expect_refused(with_record(bytes_, 1, [](fmt::shard_entry & r) { r.n_bigrams -= 1; }),
                   {bad_, "shard 1 bigram table", "ends at"});
    auto           b     = bytes_;
    const uint32_t big   = 0x7FFFFFFF;  // the first token's run offset past its successor's
    std::memcpy(b.data() + e.bigram_offset, &big, 4);
    expect_refused(b, {bad_, "shard 1 bigram table decreasing at token 0"});

    // Well-framed and signed but wrong (every run's first rank far past the suffix array): open and verify() take it
    // (the checksums hold; the table's contents are not re-derived, like the first-token table's), and every range
    // a lookup gets from it stays inside the suffix array, clamped to its first token's bucket.
    {
        auto                c         = bytes_;
        const std::uint64_t n_buckets = fmt::n_buckets_for(hd.n_vocab);
        const std::uint64_t start     = e.bigram_offset + (n_buckets + e.n_bigrams) * 4;  // start[]
        const std::uint32_t far       = 0xFFFFFFF0u;
        for (std::uint64_t j = 0; j < e.n_bigrams; ++j) std::memcpy(c.data() + start + 4 * j, &far, 4);
        const std::uint64_t sum = XXH3_64bits(c.data() + e.bigram_offset, fmt::bigram_bytes(n_buckets, e.n_bigrams));
        write_all(bad_, with_record(c, 1, [&](fmt::shard_entry & r) { r.bigram_checksum = sum; }));
        const auto ds = rest::datastore::open(bad_, 0, "", rest::datastore::access::one_pass);
        EXPECT_NO_THROW(ds->verify());
        const rest::index_shard & s = ds->shards()[1];
        int                       n_found = 0;
        for (token_id a = 0; a < 100; ++a) {
            for (token_id b = 0; b < 100; ++b) {
                rest::sa_range r;
                ASSERT_TRUE(s.bigram_range(a, b, r));
                ASSERT_LE(r.lo, r.hi) << a << " " << b;
                ASSERT_LE(r.hi, s.n_suffixes()) << a << " " << b;
                n_found += !r.empty();
            }
        }
        EXPECT_EQ(n_found, 0) << "every run starts at its bucket's end once clamped";
    }

    // Vocabularies past 2^22 get no first-token tables, and so no bigram tables either.
    const std::string wide = tmp_path("wide.idx");
    rest::write_datastore(wide, some_docs(20, 3), synthetic((1 << 22) + 1));
    const std::vector<char> wide_bytes = read_all(wide);
    expect_refused(with_record(wide_bytes, 0,
                               [&](fmt::shard_entry & r) {
                                   r.n_bigrams     = 1;
                                   r.bigram_offset = r.text_offset;
                               }),
                   {bad_, "shard 0 bigram table without a first-token table"});
}

TEST_F(index_bad_file, wrong_tokenizer_names_both) {
    expect_user_error([&] { rest::datastore::open(good_, 0x1234, "llama-spm, 32000 tokens"); },
                      {good_, "synthetic, 100 tokens", "llama-spm, 32000 tokens", "rebuild"});
    // A zero fingerprint skips the check.
    EXPECT_NO_THROW(rest::datastore::open(good_, 0, ""));
}

TEST_F(index_bad_file, open_does_not_read_sections) {
    // Garbage over the whole first shard's text and suffix array: open() is still fine (it reads only the header
    // and the table), and verify() is what catches it.
    rest::index_format::file_header hd;
    std::memcpy(&hd, bytes_.data(), sizeof(hd));
    rest::index_format::shard_entry e;
    std::memcpy(&e, bytes_.data() + hd.table_offset, sizeof(e));
    auto b = bytes_;
    for (std::uint64_t i = e.text_offset; i < e.sa_offset; ++i) {
        b[i] = 0x55;
    }
    write_all(bad_, b);
    const auto ds = rest::datastore::open(bad_);
    expect_user_error([&] { ds->verify(); }, {"shard 0 text", "checksum"});
}

}  // namespace

// The background prefetch of a large index's pages (index/index-file.h): once it is done, reading every page takes
// (almost) no page faults; small mappings and REST_INDEX_PREFETCH=0 start no thread; destroying it mid-way stops it.
#include "index/index-file.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/vfs.h>

#include <cstdlib>

namespace {

long thread_minor_faults() {
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_minflt;
}

TEST(IndexFile, PrefetcherMapsPagesInBehindTheCaller) {
    const std::string path  = tmp_path("prefetch.bin");
    const std::size_t bytes = 16u << 20;  // over the threshold (k_min_bytes)
    {
        std::ofstream     out(path, std::ios::binary);
        std::vector<char> block(1 << 20, 'x');
        for (std::size_t i = 0; i < bytes / block.size(); ++i) out.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
    const long page = sysconf(_SC_PAGESIZE);
    {
        rest::file_mapping    map(path);
        rest::page_prefetcher pf;
        pf.start(map.data(), map.size());
        ASSERT_TRUE(pf.started());
        pf.wait();
        const long    f0  = thread_minor_faults();
        std::uint64_t sum = 0;
        for (std::size_t off = 0; off < map.size(); off += static_cast<std::size_t>(page)) sum += map.data()[off];
        const long faults = thread_minor_faults() - f0;
        EXPECT_EQ(sum, std::uint64_t('x') * (bytes / static_cast<std::size_t>(page)));
        EXPECT_LT(faults, static_cast<long>(bytes / static_cast<std::size_t>(page) / 100)) << "pages not mapped in";
    }
    {
        rest::file_mapping    map(path);
        rest::page_prefetcher small;
        small.start(map.data(), rest::page_prefetcher::k_min_bytes - 1);
        EXPECT_FALSE(small.started());
        setenv("REST_INDEX_PREFETCH", "0", 1);
        rest::page_prefetcher off;
        off.start(map.data(), map.size());
        EXPECT_FALSE(off.started());
        unsetenv("REST_INDEX_PREFETCH");
        rest::page_prefetcher stopped;  // destroyed at once: stops between steps and joins, before the unmap
        stopped.start(map.data(), map.size());
        EXPECT_TRUE(stopped.started());
    }
    fs::remove(path);
}

// Pages resident of a file (mincore over a mapping of it).
std::size_t resident_pages(const std::string & path, std::size_t & n_pages) {
    rest::file_mapping  map(path);
    const long          page = sysconf(_SC_PAGESIZE);
    std::vector<unsigned char> vec((map.size() + static_cast<std::size_t>(page) - 1) / static_cast<std::size_t>(page));
    EXPECT_EQ(mincore(const_cast<std::uint8_t *>(map.data()), map.size(), vec.data()), 0);
    std::size_t resident = 0;
    for (const unsigned char v : vec) resident += v & 1;
    n_pages = vec.size();
    return resident;
}

// A committed index of at least k_drop_pages_min bytes leaves the page cache (atomic_file_writer::commit says why):
// its first reader maps it back in. (Asked of an 8 MiB file here; a smaller file keeps its pages by default.)
TEST(IndexFile, CommittedFileLeavesThePageCache) {
    const std::string path = tmp_path("committed.bin");
    struct statfs     fs_info{};
    ASSERT_EQ(statfs(rest_test::tmp_dir().c_str(), &fs_info), 0);
    if (fs_info.f_type == 0x01021994) {  // TMPFS_MAGIC: memory is its only copy, nothing can be dropped
        GTEST_SKIP() << "the test directory is a tmpfs (REST_TEST_TMP elsewhere runs this test)";
    }
    const std::size_t bytes = 8u << 20;
    // Commits 8 MiB of one byte value, dropping the pages from `drop_min` bytes; returns the pages then cached.
    auto commit_file = [&](char fill, std::uint64_t drop_min, std::size_t & n_pages) {
        {
            rest::atomic_file_writer out(path);
            std::vector<char>        block(1 << 20, fill);
            for (std::size_t i = 0; i < bytes / block.size(); ++i) out.write(block.data(), block.size());
            out.commit(drop_min);
        }
        return resident_pages(path, n_pages);
    };
    std::size_t       n_pages = 0;
    const std::size_t dropped = commit_file('y', bytes, n_pages);
    EXPECT_LT(dropped, n_pages / 20) << dropped << " of " << n_pages << " pages still cached after commit";
    rest::file_mapping map(path);
    const long         page = sysconf(_SC_PAGESIZE);
    std::uint64_t      sum  = 0;
    for (std::size_t off = 0; off < map.size(); off += static_cast<std::size_t>(page)) sum += map.data()[off];
    EXPECT_EQ(sum, std::uint64_t('y') * n_pages) << "the file reads back";
    fs::remove(path);
    // Below k_drop_pages_min (the default) the file stays cached for its first reader.
    const std::size_t kept = commit_file('z', rest::atomic_file_writer::k_drop_pages_min, n_pages);
    EXPECT_GT(kept, n_pages / 2) << kept << " of " << n_pages << " pages cached after committing a small file";
    fs::remove(path);
}

}  // namespace
