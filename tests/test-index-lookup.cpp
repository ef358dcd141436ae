// Interval lookups, continuations and document boundaries of built datastores, against naive scans.
#include "index-version1.h"
#include "ref/ref-index.h"
#include "rest/datastore.h"
#include "draft/sa-search.h"
#include "rest/index-builder.h"
#include "test-util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>
#include <stop_token>
#include <thread>

namespace {

using rest::token_id;

rest::tokenizer_identity synthetic(std::int32_t n_vocab) {
    return {0x5EED0000ull + static_cast<std::uint64_t>(n_vocab), "synthetic, " + std::to_string(n_vocab) + " tokens",
            n_vocab};
}

std::vector<std::vector<token_id>> random_docs(std::size_t n_docs, std::size_t max_len, token_id alphabet,
                                               token_id offset, std::uint32_t seed) {
    std::mt19937                       rng(seed);
    std::vector<std::vector<token_id>> docs(n_docs);
    for (auto & d : docs) {
        d.resize(rng() % (max_len + 1));  // some empty
        for (auto & t : d) {
            t = offset + static_cast<token_id>(rng() % alphabet);
        }
    }
    return docs;
}

std::vector<token_id> shard_text(const rest::index_shard & s) {
    std::vector<token_id> t(s.n_tokens());
    for (std::uint64_t i = 0; i < t.size(); ++i) {
        t[i] = s.token_at(i);
    }
    return t;
}

std::string tmp_path(const std::string & name) {
    return rest_test::tmp_dir() + "/" + name;
}

// Checks find() of one pattern on one shard against a linear scan: same count, same positions.
void expect_find_matches_scan(const rest::index_shard & s, const std::vector<token_id> & text,
                              const std::vector<token_id> & pattern) {
    const rest::sa_range             r    = s.find(pattern);
    const std::vector<std::uint64_t> want = rest_ref::occurrences(text, pattern);
    ASSERT_EQ(r.size(), want.size()) << "pattern of " << pattern.size() << " tokens";
    std::vector<std::uint64_t> got;
    for (std::uint64_t k = r.lo; k < r.hi; ++k) {
        got.push_back(s.suffix(k));
    }
    std::sort(got.begin(), got.end());
    for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "first differing occurrence " << i;
    }
}

struct lookup_case {
    std::int32_t  n_vocab;
    token_id      alphabet;
    std::uint64_t shard_tokens;  // 0: one shard
};

class index_lookup : public ::testing::TestWithParam<lookup_case> {};

// A case's random documents (over the top of its vocabulary: catches width bugs), written as a datastore whose
// file is named after the case. Returns the path.
std::string write_case(const lookup_case & c, const std::string & name, std::uint32_t seed,
                       std::vector<std::vector<token_id>> & docs) {
    docs = random_docs(300, 60, c.alphabet, c.n_vocab - c.alphabet, seed + static_cast<std::uint32_t>(c.n_vocab));
    const std::string path = tmp_path(name + "-" + std::to_string(c.n_vocab) + "-" + std::to_string(c.shard_tokens) +
                                      ".idx");
    rest::index_builder_params p;
    p.n_shard_tokens_max = c.shard_tokens;
    rest::write_datastore(path, docs, synthetic(c.n_vocab), p);
    return path;
}

TEST_P(index_lookup, find_and_continuations_match_naive_scan) {
    const lookup_case                  c      = GetParam();
    const token_id                     offset = c.n_vocab - c.alphabet;
    std::vector<std::vector<token_id>> docs;
    const std::string                  path = write_case(c, "lookup", 1234, docs);
    const auto                         ds   = rest::datastore::open(path);
    ds->verify();

    // The shards together hold exactly the documents, in order, separated as the reference joins them.
    std::vector<std::vector<token_id>> texts;
    std::vector<token_id>              joined;
    for (const auto & s : ds->shards()) {
        texts.push_back(shard_text(s));
        if (!joined.empty()) {
            joined.push_back(rest::k_doc_end);
        }
        joined.insert(joined.end(), texts.back().begin(), texts.back().end());
    }
    ASSERT_EQ(joined, rest_ref::join_documents(docs));
    if (c.shard_tokens > 0) {
        EXPECT_GT(ds->shards().size(), 1u);
    }

    std::mt19937 rng(99);
    for (int q = 0; q < 400; ++q) {
        // Half the patterns are cut from the corpus (they occur), half are random (mostly absent).
        std::vector<token_id> pattern;
        const std::size_t     len = 1 + rng() % 5;
        if (q % 2 == 0) {
            const auto & d = docs[rng() % docs.size()];
            if (d.size() < len) {
                continue;
            }
            const std::size_t at = rng() % (d.size() - len + 1);
            pattern.assign(d.begin() + at, d.begin() + at + len);
        } else {
            for (std::size_t k = 0; k < len; ++k) {
                pattern.push_back(offset + static_cast<token_id>(rng() % c.alphabet));
            }
        }
        std::uint64_t want_total = 0;
        std::map<token_id, std::uint64_t> want_next;
        for (std::size_t i = 0; i < texts.size(); ++i) {
            expect_find_matches_scan(ds->shards()[i], texts[i], pattern);
            want_total += rest_ref::occurrences(texts[i], pattern).size();
            for (const auto & [t, n] : rest_ref::next_counts(texts[i], pattern)) {
                want_next[t] += n;
            }
        }
        const rest::datastore_match m = rest::find_all(*ds, pattern);
        ASSERT_EQ(m.count, want_total);
        const auto next = rest::next_token_counts(*ds, m, SIZE_MAX);
        std::map<token_id, std::uint64_t> got_next;
        for (const auto & tc : next) {
            got_next[tc.token] += tc.count;
        }
        ASSERT_EQ(got_next, want_next) << "next-token counts of pattern " << q;
        for (std::size_t i = 1; i < next.size(); ++i) {
            ASSERT_GE(next[i - 1].count, next[i].count) << "not most frequent first at " << i;
        }
    }
}

// The bigram table: written into the file by the builder (a shard has it from open), and for a file of format
// version 1 built by index_shard::build_bigrams (which a background thread runs after a large index's open). Both
// give every bigram over the alphabet, and ids around it, the range find() gives, whose size is the naive count. A
// version 1 shard has none before the build, or after a build told to stop (the caller searches instead).
TEST_P(index_lookup, bigram_table_matches_naive_scan) {
    const lookup_case                  c      = GetParam();
    const token_id                     offset = c.n_vocab - c.alphabet;
    std::vector<std::vector<token_id>> docs;
    const std::string                  path = write_case(c, "bigram", 4321, docs);
    const std::string                  v1   = path + ".v1";
    rest_test::write_version1_copy(path, v1);
    const bool has_table  = c.n_vocab <= (1 << 22);  // first-token tables (and so bigram tables) up to 2^22 tokens
    std::vector<token_id> ids = {0, offset - 1};
    for (token_id t = 0; t < c.alphabet; ++t) ids.push_back(offset + t);
    const auto check_every_pair = [&](const rest::index_shard & s) {
        const std::vector<token_id> text = shard_text(s);
        rest::sa_range              r;
        for (const token_id a : ids) {
            for (const token_id b : ids) {
                const std::vector<token_id> pat = {a, b};
                const rest::sa_range        want = s.find(pat);
                ASSERT_EQ(s.bigram_range(a, b, r), has_table);
                if (!has_table) continue;
                ASSERT_EQ(r.size(), rest_ref::occurrences(text, pat).size()) << a << " " << b;
                if (!want.empty()) {
                    ASSERT_EQ(r, want) << a << " " << b;
                }
            }
        }
    };
    // One pass: no background thread that would build the tables while this test looks at them.
    const auto ds = rest::datastore::open(path, 0, "", rest::datastore::access::one_pass);
    EXPECT_EQ(ds->info().format_version, 3u);
    for (const rest::index_shard & s : ds->shards()) {
        check_every_pair(s);  // the file's table, from open
    }
    const auto old = rest::datastore::open(v1, 0, "", rest::datastore::access::one_pass);
    EXPECT_EQ(old->info().format_version, 1u);
    for (const rest::index_shard & s : old->shards()) {
        rest::sa_range r;
        EXPECT_FALSE(s.bigram_range(offset, offset, r)) << "a table before any build";
        std::stop_source stopped;
        stopped.request_stop();
        s.build_bigrams(stopped.get_token());
        EXPECT_FALSE(s.bigram_range(offset, offset, r)) << "a table from a build told to stop";
        s.build_bigrams({});
        check_every_pair(s);
    }
}

// The builder's suffix samples (format version 3) against the shard's own suffix array and text: one row per
// sample_step() ranks, each the suffix's first sample_tokens() tokens, a separator from its document's end on. A
// version 2 copy of the file has none, and the drafter's searches give the same ranges with and without them.
TEST_P(index_lookup, sample_rows_match_naive_reading) {
    const lookup_case                  c = GetParam();
    std::vector<std::vector<token_id>> docs;
    const std::string                  path = write_case(c, "samples", 97, docs);
    const std::string                  v2   = path + ".v2";
    rest_test::write_version_copy(path, v2, 2);
    const auto ds  = rest::datastore::open(path, 0, "", rest::datastore::access::one_pass);
    const auto old = rest::datastore::open(v2, 0, "", rest::datastore::access::one_pass);
    ASSERT_EQ(ds->shards().size(), old->shards().size());
    const std::uint64_t step = rest::index_shard::sample_step();
    std::mt19937        rng(5);
    for (std::size_t i = 0; i < ds->shards().size(); ++i) {
        const rest::index_shard & s = ds->shards()[i];
        ASSERT_EQ(s.n_sample_rows(), (s.full().size() + step - 1) / step) << "shard " << i;
        EXPECT_EQ(old->shards()[i].n_sample_rows(), 0u);
        for (std::uint64_t j = 0; j < s.n_sample_rows(); ++j) {
            bool ended = false;
            for (std::size_t d = 0; d < rest::index_shard::sample_tokens(); ++d) {
                const std::uint64_t k = s.key_at(s.suffix(j * step) + d);
                ended = ended || k == 0 || k == UINT64_MAX;
                ASSERT_EQ(s.sample_row_key(j, d), ended ? UINT64_MAX : k) << "shard " << i << " row " << j << " token " << d;
            }
        }
        const std::vector<token_id> text = shard_text(s);
        for (int trial = 0; trial < 200; ++trial) {
            const std::uint64_t   at = rng() % text.size();
            std::vector<token_id> pat;
            for (std::uint64_t k = at; k < text.size() && text[k] != rest::k_doc_end && pat.size() < 1 + trial % 12; ++k) {
                pat.push_back(text[k]);
            }
            if (pat.empty()) continue;
            EXPECT_EQ(s.find(pat), old->shards()[i].find(pat)) << "shard " << i << " trial " << trial;
            // From the pattern's bigram range (depth 2), as the drafter searches.
            rest::sa_bigram_memo memo;
            EXPECT_EQ(rest::sa_find(s, pat, &memo), old->shards()[i].find(pat)) << "shard " << i << " trial " << trial;
            // Token by token, as the drafter extends a match: by the rows where a range is large, by the suffix
            // array in the version 2 copy (suffixes that run off the text's end included: a file's last document
            // has no separator after it).
            rest::sa_range a = s.full(), b = old->shards()[i].full();
            for (std::size_t d = 0; d < pat.size(); ++d) {
                a = s.narrow(a, static_cast<std::uint32_t>(d), pat[d]);
                b = old->shards()[i].narrow(b, static_cast<std::uint32_t>(d), pat[d]);
                ASSERT_EQ(a, b) << "narrow, shard " << i << " trial " << trial << " depth " << d;
            }
        }
    }
}

// The table a datastore of format version 1 opened for lookups gets from its background thread (after the page
// prefetch): it appears within seconds and agrees with find().
TEST(index_lookup_bigrams, built_in_the_background_after_open) {
    const auto        docs = random_docs(4000, 120, 50, 7, 99);  // ~240k tokens: a file past the prefetch's 1 MiB
    const std::string path = tmp_path("bigram-background.idx");
    rest::write_datastore(path, docs, synthetic(512), {});
    rest_test::write_version1_copy(path, path + ".v1");  // a file without the table
    const auto ds = rest::datastore::open(path + ".v1");
    ASSERT_EQ(ds->shards().size(), 1u);
    const rest::index_shard &  s  = ds->shards()[0];
    rest::sa_range             r;
    const auto                 t0 = std::chrono::steady_clock::now();
    while (!s.bigram_range(7, 7, r) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(s.bigram_range(7, 7, r)) << "no bigram table 30 s after open";
    for (token_id a = 7; a < 57; a += 7) {
        for (token_id b = 7; b < 57; b += 3) {
            const std::vector<token_id> pat = {a, b};
            ASSERT_TRUE(s.bigram_range(a, b, r));
            ASSERT_EQ(r, s.find(pat)) << a << " " << b;
        }
    }
}

// A suffix array out of order (a corrupt file: a new run at 19 of 20 ranks here) would make a table of ~8 bytes per
// token: past bigram_cap() entries (n_sa / 4 and a little) the build gives up and leaves no table, so searches go on
// as without one. The same text with its suffixes grouped by their first two tokens gets one.
TEST(index_lookup_bigrams, a_table_too_large_for_real_text_is_abandoned) {
    constexpr std::uint64_t    n = 200000, vocab = 20;
    std::vector<std::uint16_t> text(n);
    std::vector<std::uint32_t> sa(n), buckets(vocab + 1, static_cast<std::uint32_t>(n));
    std::mt19937               rng(5);
    for (std::uint64_t i = 0; i < n; ++i) {
        text[i] = static_cast<std::uint16_t>(rng() % vocab);
        sa[i]   = static_cast<std::uint32_t>(i);  // text order, not suffix order
    }
    buckets[0] = 0;  // every suffix in token 0's bucket: monotone, ends at n, as open() checks
    rest::index_shard s(text.data(), sa.data(), n, 2);
    s.set_first_token_buckets(buckets.data(), buckets.size());
    s.build_bigrams({});
    rest::sa_range r;
    EXPECT_FALSE(s.bigram_range(0, 1, r));
    // The same arrays sorted as a suffix array would be (by first token only, runs of the second within): a table.
    std::vector<std::uint32_t> by_first(n);
    std::iota(by_first.begin(), by_first.end(), 0u);
    std::stable_sort(by_first.begin(), by_first.end(), [&](std::uint32_t a, std::uint32_t b) {
        const std::uint32_t na = a + 1 < n ? text[a + 1] : 0, nb = b + 1 < n ? text[b + 1] : 0;
        return std::pair(text[a], na) < std::pair(text[b], nb);
    });
    std::vector<std::uint32_t> b2(vocab + 1, 0);
    for (std::uint64_t i = 0; i < n; ++i) b2[text[i] + 1]++;
    for (std::uint64_t t = 0; t < vocab; ++t) b2[t + 1] += b2[t];
    rest::index_shard sorted(text.data(), by_first.data(), n, 2);
    sorted.set_first_token_buckets(b2.data(), b2.size());
    sorted.build_bigrams({});
    EXPECT_TRUE(sorted.bigram_range(0, 1, r)) << "a table of at most 400 bigrams over 200k tokens was refused";
}

INSTANTIATE_TEST_SUITE_P(widths_and_shards, index_lookup,
                         ::testing::Values(lookup_case{512, 3, 0}, lookup_case{512, 40, 0},
                                           lookup_case{32000, 5, 1000}, lookup_case{65534, 4, 0},
                                           lookup_case{151936, 6, 0}, lookup_case{151936, 3, 700},
                                           lookup_case{20000000, 5, 0}));

// Patterns longer than the suffix samples' rows (8 tokens): find() then compares the text at a row's suffix where the
// row agrees with the pattern's first 8. A two-token alphabet with copied blocks makes long runs of equal rows.
TEST(index_lookup_long, patterns_past_the_sample_keys_match_naive_scan) {
    for (const std::int32_t n_vocab : {512, 151936}) {
        std::mt19937                       rng(17 + n_vocab);
        const auto                         block = random_docs(1, 40, 2, n_vocab - 2, rng())[0];
        std::vector<std::vector<token_id>> docs;
        for (int i = 0; i < 400; ++i) {
            std::vector<token_id> d;
            for (int c = 0; c < 1 + static_cast<int>(rng() % 4); ++c) {
                d.insert(d.end(), block.begin(), block.end());
                d.push_back(n_vocab - 1 - static_cast<token_id>(rng() % 2));  // a varying token between copies
            }
            docs.push_back(d);
        }
        const std::string path = tmp_path("lookup-long-" + std::to_string(n_vocab) + ".idx");
        rest::write_datastore(path, docs, synthetic(n_vocab), {});
        const auto ds = rest::datastore::open(path);
        ASSERT_EQ(ds->shards().size(), 1u);
        const auto & s    = ds->shards()[0];
        const auto   text = shard_text(s);
        for (int q = 0; q < 600; ++q) {
            const auto &      d   = docs[rng() % docs.size()];
            const std::size_t len = std::min<std::size_t>(d.size(), 1 + rng() % 40);
            const std::size_t at  = rng() % (d.size() - len + 1);
            std::vector<token_id> pattern(d.begin() + at, d.begin() + at + len);
            if (q % 3 == 1) {
                pattern.back() = n_vocab - 1 - (pattern.back() - (n_vocab - 2)) % 2;  // often absent
            }
            expect_find_matches_scan(s, text, pattern);
        }
    }
}

// narrow() and run_at() step by step, including on a shard built from raw arrays (separator suffixes kept).
TEST(index_lookup_raw, narrow_and_run_at) {
    std::mt19937          rng(5);
    std::vector<token_id> text;
    for (int i = 0; i < 3000; ++i) {
        text.push_back(rng() % 50 == 0 ? rest::k_doc_end : static_cast<token_id>(rng() % 4));
    }
    // Full suffix array, separator suffixes included, as the 4-argument constructor documents.
    std::vector<std::uint32_t> sa(text.size());
    std::iota(sa.begin(), sa.end(), 0u);
    std::sort(sa.begin(), sa.end(), [&](std::uint32_t a, std::uint32_t b) { return rest_ref::suffix_less(text, a, b); });
    std::vector<std::uint16_t> t16(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        t16[i] = text[i] < 0 ? 0xFFFF : static_cast<std::uint16_t>(text[i]);
    }
    const rest::index_shard s(t16.data(), sa.data(), text.size(), 2);
    for (int q = 0; q < 200; ++q) {
        std::vector<token_id> pattern;
        rest::sa_range        r = s.full();
        for (std::uint32_t d = 0; d < 6; ++d) {
            const token_id t = static_cast<token_id>(rng() % 4);
            pattern.push_back(t);
            r = s.narrow(r, d, t);
            ASSERT_EQ(r.size(), rest_ref::occurrences(text, pattern).size()) << "depth " << d;
            if (r.empty()) {
                break;
            }
            // Every run of the next depth partitions r.
            std::uint64_t covered = 0;
            for (std::uint64_t k = r.lo; k < r.hi;) {
                const rest::sa_range run = s.run_at(r, d + 1, k);
                ASSERT_EQ(run.lo, k);
                for (std::uint64_t j = run.lo; j < run.hi; ++j) {
                    ASSERT_EQ(s.next_token(j, d + 1), s.next_token(k, d + 1));
                }
                covered += run.size();
                k = run.hi;
            }
            ASSERT_EQ(covered, r.size());
        }
    }
}

// Continuations stop at the document boundary: the text after a document never shows up as its continuation.
TEST(index_lookup_docs, no_document_leakage) {
    // Each document ends with the marker [7, 8]; the next starts with 9. Without separators "7 8" would continue
    // with 9, and "8 9" would be found.
    std::vector<std::vector<token_id>> docs;
    std::mt19937                       rng(3);
    for (int i = 0; i < 50; ++i) {
        std::vector<token_id> d = {9};
        for (int k = 0; k < 20; ++k) {
            d.push_back(static_cast<token_id>(rng() % 6));
        }
        d.push_back(7);
        d.push_back(8);
        docs.push_back(d);
    }
    for (std::uint64_t shard_tokens : {0ull, 100ull}) {
        const std::string path = tmp_path("leak-" + std::to_string(shard_tokens) + ".idx");
        rest::index_builder_params p;
        p.n_shard_tokens_max = shard_tokens;
        rest::write_datastore(path, docs, synthetic(16), p);
        const auto ds = rest::datastore::open(path);

        const std::vector<token_id> end_marker = {7, 8};
        const auto                  m          = rest::find_all(*ds, end_marker);
        EXPECT_EQ(m.count, docs.size());
        const auto next = rest::next_token_counts(*ds, m, 10);
        ASSERT_EQ(next.size(), 1u);
        EXPECT_EQ(next[0].token, rest::k_doc_end);
        EXPECT_EQ(next[0].count, docs.size());
        const std::vector<token_id> across = {8, 9};
        EXPECT_EQ(rest::find_all(*ds, across).count, 0u);

        // Every continuation read from every occurrence of 9 is a suffix of one document, and no longer.
        const std::vector<token_id> start = {9};
        const auto                  ms    = rest::find_all(*ds, start);
        for (std::size_t i = 0; i < ds->shards().size(); ++i) {
            const auto & s = ds->shards()[i];
            for (std::uint64_t k = ms.ranges[i].lo; k < ms.ranges[i].hi; ++k) {
                std::vector<token_id> buf(100);
                buf.resize(s.read(s.suffix(k), buf));
                ASSERT_EQ(buf.size(), 23u) << "continuation crosses a document boundary";
                ASSERT_EQ(buf.back(), 8);
            }
        }
    }
}

TEST(index_lookup_docs, longest_suffix_matches_naive) {
    const auto        docs = random_docs(100, 40, 4, 0, 77);
    const std::string path = tmp_path("longest.idx");
    rest::index_builder_params p;
    p.n_shard_tokens_max = 900;
    rest::write_datastore(path, docs, synthetic(300), p);
    const auto            ds   = rest::datastore::open(path);
    const auto            text = rest_ref::join_documents(docs);
    std::mt19937          rng(8);
    for (int q = 0; q < 200; ++q) {
        std::vector<token_id> ctx(1 + rng() % 30);
        for (auto & t : ctx) {
            t = static_cast<token_id>(rng() % 5);  // token 4 never occurs
        }
        const std::size_t max_len = 1 + rng() % 20;
        std::size_t       want    = 0;
        for (std::size_t len = 1; len <= std::min(max_len, ctx.size()); ++len) {
            std::span<const token_id> suffix(ctx.data() + ctx.size() - len, len);
            if (!rest_ref::occurrences(text, {suffix.begin(), suffix.end()}).empty()) {
                want = len;
            }
        }
        const auto m = rest::find_longest_suffix(*ds, ctx, max_len);
        ASSERT_EQ(m.length, want) << "query " << q;
        if (want > 0) {
            std::vector<token_id> suffix(ctx.end() - want, ctx.end());
            EXPECT_EQ(m.count, rest_ref::occurrences(text, suffix).size());
        }
    }
}

}  // namespace
