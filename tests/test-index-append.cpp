// `rest index append` and `compact` at the library level: an index built from A and then appended with B answers
// every lookup as one built from A and B does, and both as a naive scan over the documents; an interrupted or refused
// append leaves the old file as it was; readers that have the old file open keep working; compaction merges
// shards without changing an answer.
#include "index-version1.h"
#include "index/index-file.h"
#include "rest/datastore.h"
#include "rest/index-builder.h"
#include "test-util.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

namespace {

namespace fs = std::filesystem;
using rest::token_id;
using docs_t = std::vector<std::vector<token_id>>;

rest::tokenizer_identity synthetic(std::int32_t n_vocab, std::uint64_t fp = 0xABCDEF) {
    return {fp, "synthetic, " + std::to_string(n_vocab) + " tokens", n_vocab};
}

std::string tmp_path(const std::string & name) {
    return rest_test::tmp_dir() + "/append-" + name;
}

// Small alphabets make long repeated patterns, so lookups have many occurrences and continuations.
docs_t some_docs(std::size_t n, std::uint32_t seed, token_id alphabet) {
    std::mt19937 rng(seed);
    docs_t       docs(n);
    for (auto & d : docs) {
        d.resize(1 + rng() % 60);
        for (auto & t : d) t = static_cast<token_id>(rng() % alphabet);
    }
    return docs;
}

std::vector<char> read_all(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void build(const std::string & path, const docs_t & docs, std::uint64_t shard_tokens, const std::string & base = "",
           const rest::tokenizer_identity & tok = synthetic(12)) {
    rest::index_builder_params p;
    p.n_shard_tokens_max = shard_tokens;
    p.base               = base;
    rest::write_datastore(path, docs, tok, p);
}

// Occurrences of pattern inside documents, and the tokens that follow them (-1: the document ends there).
std::map<token_id, std::uint64_t> naive_next(const docs_t & docs, const std::vector<token_id> & pattern,
                                             std::uint64_t & count) {
    std::map<token_id, std::uint64_t> next;
    count = 0;
    for (const auto & d : docs) {
        for (std::size_t i = 0; i + pattern.size() <= d.size(); ++i) {
            if (std::equal(pattern.begin(), pattern.end(), d.begin() + i)) {
                ++count;
                ++next[i + pattern.size() < d.size() ? d[i + pattern.size()] : rest::k_doc_end];
            }
        }
    }
    return next;
}

// Every pattern of length 1-3 over a small alphabet, plus some copied from the documents: counts and continuations
// equal the naive scan's.
void expect_lookups_match(const rest::datastore & ds, const docs_t & docs, std::uint32_t seed) {
    std::vector<std::vector<token_id>> patterns;
    for (token_id a = 0; a < 12; ++a) {
        patterns.push_back({a});
        for (token_id b = 0; b < 12; b += 3) patterns.push_back({a, b, token_id((a + b) % 12)});
    }
    std::mt19937 rng(seed);
    for (int k = 0; k < 100; ++k) {
        const auto & d   = docs[rng() % docs.size()];
        const size_t at  = rng() % d.size();
        const size_t len = std::min<size_t>(1 + rng() % 8, d.size() - at);
        patterns.emplace_back(d.begin() + at, d.begin() + at + len);
    }
    for (const auto & pat : patterns) {
        std::uint64_t count = 0;
        const auto    next  = naive_next(docs, pat, count);
        const auto    m     = rest::find_all(ds, pat);
        ASSERT_EQ(m.count, count) << "pattern of " << pat.size() << " starting " << pat[0];
        if (count == 0) continue;
        std::map<token_id, std::uint64_t> got;
        for (const auto & tc : rest::next_token_counts(ds, m, 1000)) got[tc.token] = tc.count;
        EXPECT_EQ(got, next) << "continuations of a pattern of " << pat.size();
    }
}

TEST(index_append, answers_as_a_full_build_and_a_naive_scan) {
    for (std::uint64_t shard_tokens : {0ull, 300ull}) {
        const docs_t a = some_docs(80, 1, 12), b = some_docs(70, 2, 12);
        docs_t       ab = a;
        ab.insert(ab.end(), b.begin(), b.end());
        const std::string appended = tmp_path("a-then-b.idx"), full = tmp_path("ab.idx");
        build(appended, a, shard_tokens);
        const auto shards_a = rest::datastore::open(appended)->info().n_shards;
        build(appended, b, shard_tokens, appended);
        build(full, ab, shard_tokens);
        const auto ds = rest::datastore::open(appended, 0xABCDEF);
        ds->verify();
        EXPECT_EQ(ds->info().n_documents, ab.size());
        EXPECT_EQ(ds->info().n_tokens, rest::datastore::open(full)->info().n_tokens);
        EXPECT_GT(ds->info().n_shards, shards_a) << "B goes into new shards";
        // Every shard, copied or new, has its bigram table from the file (one pass: no background build).
        const auto one_pass = rest::datastore::open(appended, 0, "", rest::datastore::access::one_pass);
        for (std::size_t i = 0; i < one_pass->shards().size(); ++i) {
            rest::sa_range r;
            EXPECT_TRUE(one_pass->shards()[i].bigram_range(1, 2, r)) << "shard " << i << " lost its bigram table";
        }
        expect_lookups_match(*ds, ab, 7);
        expect_lookups_match(*rest::datastore::open(full), ab, 7);

        // Compaction: one shard (or as few as the cap allows), the same answers.
        rest::index_builder_params p;
        p.n_shard_tokens_max = shard_tokens;
        const auto info      = rest::compact_datastore(appended, p);
        EXPECT_EQ(info.n_shards, rest::datastore::open(full)->info().n_shards);
        const auto compacted = rest::datastore::open(appended);
        compacted->verify();
        expect_lookups_match(*compacted, ab, 8);
        if (shard_tokens == 0) {
            EXPECT_EQ(read_all(appended), read_all(full)) << "compacting A+B is building A and B at once";
        }
    }
}

// A base written by format version 1 (no bigram tables) takes an append: its shards are copied as they are (readers
// build their tables after open, as before), the new ones carry theirs, and the answers are the naive scan's.
TEST(index_append, onto_a_version_1_base) {
    const docs_t a = some_docs(80, 3, 12), b = some_docs(70, 4, 12);
    docs_t       ab = a;
    ab.insert(ab.end(), b.begin(), b.end());
    const std::string built = tmp_path("a-v3.idx"), old = tmp_path("a-v1.idx");
    build(built, a, 300);
    rest_test::write_version1_copy(built, old);
    const auto n_a = rest::datastore::open(old)->info().n_shards;
    build(old, b, 300, old);
    const auto ds = rest::datastore::open(old, 0xABCDEF, "", rest::datastore::access::one_pass);
    ds->verify();
    EXPECT_EQ(ds->info().format_version, 3u);
    ASSERT_GT(ds->info().n_shards, n_a);
    for (std::size_t i = 0; i < ds->shards().size(); ++i) {
        rest::sa_range r;
        EXPECT_EQ(ds->shards()[i].bigram_range(1, 2, r), i >= n_a) << "shard " << i << ": a table from the file";
    }
    expect_lookups_match(*ds, ab, 9);
}

// `--index A --index B`: two files opened as one answer as one index of A and B, and a file of another tokenizer
// among them is refused.
TEST(index_append, several_files_open_as_one) {
    const docs_t a = some_docs(60, 11, 12), b = some_docs(50, 12, 12);
    docs_t       ab = a;
    ab.insert(ab.end(), b.begin(), b.end());
    const std::string pa = tmp_path("multi-a.idx"), pb = tmp_path("multi-b.idx"), other = tmp_path("multi-other.idx");
    build(pa, a, 200);
    build(pb, b, 0);
    const auto ds = rest::datastore::open(std::vector<std::string>{pa, pb}, 0xABCDEF);
    EXPECT_EQ(ds->info().n_documents, ab.size());
    EXPECT_EQ(ds->info().n_shards, rest::datastore::open(pa)->info().n_shards + 1);
    ds->verify();
    expect_lookups_match(*ds, ab, 10);
    EXPECT_THROW(rest::datastore::open(std::vector<std::string>{pa, pb, pa}), rest::user_error) << "a file twice";
    build(other, b, 0, "", synthetic(12, 0x77));
    EXPECT_THROW(rest::datastore::open(std::vector<std::string>{pa, other}), rest::user_error);
    EXPECT_THROW(rest::datastore::open(std::vector<std::string>{pa, other}, 0xABCDEF), rest::user_error);
}

// A builder destroyed before finish() (an interrupted append) leaves the old index byte for byte, and no temp file.
TEST(index_append, interrupted_append_keeps_the_old_index) {
    const std::string path = tmp_path("interrupted.idx");
    build(path, some_docs(30, 3, 12), 0);
    const auto before = read_all(path);
    std::string temp;
    {
        rest::index_builder_params p;
        p.base = path;
        rest::index_builder b(path, synthetic(12), p);
        b.add_document(std::vector<token_id>{1, 2, 3});
        temp = b.temp_path();
        EXPECT_TRUE(fs::exists(temp));
    }
    EXPECT_FALSE(fs::exists(temp));
    EXPECT_EQ(read_all(path), before);
}

// A reader that opened the index before an append keeps answering from the old file (its inode), and a new reader
// sees the appended documents.
TEST(index_append, open_readers_keep_the_old_file) {
    const std::string path = tmp_path("readers.idx");
    const docs_t      a    = some_docs(40, 4, 12);
    build(path, a, 0);
    const auto old_reader = rest::datastore::open(path);
    build(path, {{11, 11, 11, 11, 11, 11, 11, 11}}, 0, path);
    const std::vector<token_id> run = {11, 11, 11, 11, 11, 11, 11, 11};
    std::uint64_t               n_old = 0;
    naive_next(a, run, n_old);
    EXPECT_EQ(rest::find_all(*old_reader, run).count, n_old);
    EXPECT_EQ(rest::find_all(*rest::datastore::open(path), run).count, n_old + 1);
    expect_lookups_match(*old_reader, a, 9);
}

// A base with another tokenizer, or with a corrupt section, is refused with one line, and the file is untouched.
TEST(index_append, a_foreign_or_corrupt_base_is_refused) {
    const std::string path = tmp_path("refused.idx");
    build(path, some_docs(30, 5, 12), 0);
    auto bytes = read_all(path);
    try {
        build(path, some_docs(5, 6, 12), 0, path, synthetic(12, 0x1234));
        ADD_FAILURE() << "a base of another tokenizer was accepted";
    } catch (const rest::user_error & e) {
        EXPECT_NE(std::string(e.what()).find("tokenizer"), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_all(path), bytes);

    bytes[4096 + 10] ^= 0x01;  // the first shard's text section starts at the first page after the header
    {
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), (std::streamsize) bytes.size());
    }
    try {
        build(path, some_docs(5, 6, 12), 0, path);
        ADD_FAILURE() << "a corrupt base was copied";
    } catch (const rest::user_error & e) {
        EXPECT_NE(std::string(e.what()).find("corrupt (text checksum)"), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_all(path), bytes);
}

}  // namespace

// A store grown by many small appends that merge their trailing shards (the server's named corpora): shard sizes
// stay geometric, so the shard count grows like log2 of the tokens where plain appends add a shard per call, and
// every lookup still answers as the naive scan over all documents in order.
TEST(index_append, merging_appends_keep_few_shards_and_every_answer) {
    const std::string path = tmp_path("merging.idx");
    std::filesystem::remove(path);
    const docs_t      docs = some_docs(300, 11, 12);
    std::size_t       most = 0;
    for (std::size_t i = 0; i < docs.size(); ++i) {
        const auto info = rest::append_merging(path, std::span(&docs[i], 1), synthetic(12));
        EXPECT_EQ(info.n_documents, i + 1);
        most = std::max(most, info.n_shards);
    }
    const auto ds = rest::datastore::open(path, 0xABCDEF);
    ds->verify();
    std::uint64_t tokens = 0;
    for (const auto & d : docs) tokens += d.size();
    EXPECT_EQ(ds->info().n_tokens, tokens);
    // Each shard holds more than twice what follows it: log2(300 docs x ~30 tokens / ~30) + 1 ~ 9.
    EXPECT_LE(most, 10u) << "plain appends would have made 300 shards";
    expect_lookups_match(*ds, docs, 9);
    // A merge that re-sorts the whole store (every shard merged) gives the same answers too.
    const docs_t big = some_docs(400, 12, 12);
    docs_t       all = docs;
    all.insert(all.end(), big.begin(), big.end());
    EXPECT_EQ(rest::append_merging(path, big, synthetic(12)).n_shards, 1u);
    expect_lookups_match(*rest::datastore::open(path, 0xABCDEF), all, 10);
}

// A temp file is held locked by its writer for as long as the writer lives, also by a process that is killed: a
// server starting on a corpus directory removes only temp files nobody holds (apps/server/corpora.cpp).
TEST(index_append, a_writer_holds_its_temp_file_locked) {
    const std::string path = tmp_path("locked.idx");
    std::string       temp;
    {
        rest::atomic_file_writer w(path);
        temp         = w.temp_path();
        const int fd = ::open(temp.c_str(), O_RDONLY);
        ASSERT_GE(fd, 0);
        EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0) << "another process could take the writer's temp file for stale";
        ::close(fd);
    }
    EXPECT_FALSE(std::filesystem::exists(temp)) << "an uncommitted writer removes its temp file";
}
