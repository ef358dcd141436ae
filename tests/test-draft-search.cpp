// Suffix-array pattern search, the incremental longest-suffix match and the context matcher, each against a
// brute-force scan on seeded random corpora (u16 and u32 widths, tiny to large alphabets).
#include "draft/context-matcher.h"
#include "draft/sa-search.h"
#include "ref/ref-draft.h"

#include <gtest/gtest.h>

#include <bit>
#include <memory>

using namespace rest;
using rest_ref::ref_shard;

namespace {

std::vector<std::size_t> positions_in(const index_shard & s, sa_range r) {
    std::vector<std::size_t> pos;
    for (std::uint64_t i = r.lo; i < r.hi; ++i) {
        pos.push_back(s.suffix(i));
    }
    std::sort(pos.begin(), pos.end());
    return pos;
}

// A context that mostly follows the corpus (so long matches happen), with random jumps and unseen tokens.
std::vector<token_id> wandering_context(std::mt19937 & rng, const std::vector<token_id> & text, int n, int n_vocab) {
    std::vector<token_id>                      out;
    std::uniform_int_distribution<std::size_t> at(0, text.size() - 1);
    std::uniform_real_distribution<double>     u(0, 1);
    std::size_t                                pos = at(rng);
    while (static_cast<int>(out.size()) < n) {
        const double r = u(rng);
        if (r < 0.75 && pos < text.size() && text[pos] != k_doc_end) {
            out.push_back(text[pos++]);
        } else if (r < 0.95) {
            pos = at(rng);
        } else {
            out.push_back(static_cast<token_id>(rng() % static_cast<unsigned>(n_vocab + 3)));  // maybe unseen
        }
    }
    return out;
}

struct corpus_case {
    int n_docs, len_max, n_vocab, width;
};

const corpus_case k_cases[] = {
    {1, 1, 2, 2},      {3, 40, 2, 2},     {20, 60, 3, 4},     {50, 100, 8, 2},
    {40, 200, 50, 4},  {10, 500, 1000, 2}, {30, 100, 5, 4},   {5, 300, 60000, 4}, {60, 400, 3, 2},
};

}  // namespace

// With the suffix samples of a format version 3 file too: searches over ranges of 256 ranks or more go by them (a
// corpus of a few tokens' vocabulary has such ranges; patterns of up to 12 tokens pass the rows' 8).
TEST(draft_search, shard_find_equals_scan) {
    std::mt19937 rng(1);
    for (const corpus_case & c : k_cases) {
      for (const bool sampled : {false, true}) {
        const auto      docs = rest_ref::random_documents(rng, c.n_docs, c.len_max, c.n_vocab);
        ref_shard       shard(rest_ref::join_documents(docs), c.width);
        if (sampled) shard.add_samples();
        const index_shard s = shard.view();
        for (int trial = 0; trial < 300; ++trial) {
            const std::size_t     len = 1 + rng() % (sampled ? 12 : 6);
            std::vector<token_id> pat;
            if (trial % 3 == 0) {  // random pattern, often absent
                for (std::size_t i = 0; i < len; ++i) {
                    pat.push_back(static_cast<token_id>(rng() % static_cast<unsigned>(c.n_vocab + 1)));
                }
            } else {  // a substring of the corpus, present
                const std::size_t p = rng() % shard.text.size();
                for (std::size_t i = p; i < shard.text.size() && pat.size() < len && shard.text[i] != k_doc_end; ++i) {
                    pat.push_back(shard.text[i]);
                }
            }
            if (pat.empty()) {
                continue;
            }
            const auto want = rest_ref::occurrences(shard.text, pat);
            const auto got  = positions_in(s, s.find(pat));
            ASSERT_EQ(got, want) << "vocab " << c.n_vocab << " width " << c.width << " trial " << trial << " sampled " << sampled;
            // The rows' search gives the very range the suffix array's does, its empty ranges' place included.
            if (sampled) {
                index_shard no_rows = s;
                no_rows.set_sample_table(nullptr, 0);
                ASSERT_EQ(s.find(pat), no_rows.find(pat)) << "with and without rows, trial " << trial;
            }
        }
      }
    }
}

// narrow() token by token from the whole shard, as the drafter extends a match: with the suffix samples, a range of
// 256 ranks or more at a depth under the rows' 8 tokens is narrowed by them (its common prefix is not compared: the
// search reads the pattern from `depth` on). The same ranges as without them, the positions a scan finds.
TEST(draft_search, shard_narrow_equals_scan) {
    std::mt19937 rng(3);
    for (const corpus_case & c : k_cases) {
        const auto  docs = rest_ref::random_documents(rng, c.n_docs, c.len_max, c.n_vocab);
        ref_shard   shard(rest_ref::join_documents(docs), c.width);
        shard.add_samples();
        const index_shard s       = shard.view();
        index_shard       no_rows = s;
        no_rows.set_sample_table(nullptr, 0);
        for (int trial = 0; trial < 200; ++trial) {
            const std::size_t     p = rng() % shard.text.size();
            std::vector<token_id> pat;
            for (std::size_t i = p; i < shard.text.size() && pat.size() < 10 && shard.text[i] != k_doc_end; ++i) {
                pat.push_back(shard.text[i]);
            }
            if (trial % 4 == 0 && !pat.empty()) {  // a last token that may not follow
                pat.back() = static_cast<token_id>(rng() % static_cast<unsigned>(c.n_vocab + 1));
            }
            sa_range r = s.full(), q = s.full();
            for (std::size_t d = 0; d < pat.size(); ++d) {
                r = s.narrow(r, static_cast<std::uint32_t>(d), pat[d]);
                q = no_rows.narrow(q, static_cast<std::uint32_t>(d), pat[d]);
                ASSERT_EQ(r, q) << "vocab " << c.n_vocab << " trial " << trial << " depth " << d;
                const std::span<const token_id> prefix(pat.data(), d + 1);
                ASSERT_EQ(positions_in(s, r), rest_ref::occurrences(shard.text, prefix))
                    << "vocab " << c.n_vocab << " trial " << trial << " depth " << d;
                if (r.empty()) break;
            }
        }
    }
}

TEST(draft_search, shard_find_edge_cases) {
    const ref_shard   shard(rest_ref::join_documents({{65534, 0, 65534}, {0}}), 2);  // largest u16 token
    const index_shard s = shard.view();
    const token_id    big[] = {65534};
    EXPECT_EQ(s.find(big).size(), 2u);
    const token_id    none[] = {65535};  // not representable at width 2: never found
    EXPECT_TRUE(s.find(none).empty());
    const token_id    neg[] = {0, k_doc_end};
    EXPECT_TRUE(s.find(neg).empty());
    EXPECT_EQ(s.find(std::span<const token_id>{}).size(), s.full().size());
    const token_id    across[] = {65534, 0};  // once inside the first document; "65534 | 0" across the boundary is not
    EXPECT_EQ(rest_ref::occurrences(shard.text, across).size(), 1u);
    EXPECT_EQ(s.find(across).size(), 1u);
}

TEST(draft_search, incremental_match_equals_scan) {
    std::mt19937 rng(2);
    for (const corpus_case & c : k_cases) {
        for (const int n_max : {1, 3, 16, 100}) {
            const auto      docs = rest_ref::random_documents(rng, c.n_docs, c.len_max, c.n_vocab);
            const ref_shard shard(rest_ref::join_documents(docs), c.width);
            const index_shard s = shard.view();
            const std::vector<token_id> full = wandering_context(rng, shard.text, 400, c.n_vocab);
            sa_match          m;
            sa_match_counters counters;
            std::uint64_t     n_updates = 0;
            std::size_t       seen = 0;
            std::size_t       n    = rng() % 20;  // the "prompt"
            while (true) {
                const std::span<const token_id> ctx(full.data(), n);
                sa_match_update(s, m, ctx, seen, n_max, &counters);
                seen = n;
                n_updates++;
                const int want = rest_ref::longest_suffix({&shard.text}, ctx, n_max);
                ASSERT_EQ(m.len, want) << "vocab " << c.n_vocab << " n_max " << n_max << " at context length " << n;
                if (want == 0) {
                    ASSERT_EQ(m.range, s.full()) << "no match keeps the whole shard, context length " << n;
                } else {
                    ASSERT_EQ(positions_in(s, m.range),
                              rest_ref::occurrences(shard.text, ctx.last(static_cast<std::size_t>(want))))
                        << "range of the match, context length " << n;
                }
                if (n == full.size()) {
                    break;
                }
                n = std::min(full.size(), n + 1 + rng() % 4);  // accept 1..4 tokens
            }
            // A step costs at most one search per halving of the length bound (plus one), never n_max searches.
            const std::uint64_t per_update = static_cast<std::uint64_t>(std::bit_width(static_cast<unsigned>(n_max))) + 1;
            EXPECT_LE(counters.n_find, n_updates * per_update) << "vocab " << c.n_vocab << " n_max " << n_max;
        }
    }
}

TEST(draft_search, context_matcher_equals_scan) {
    std::mt19937 rng(3);
    for (const int n_vocab : {2, 4, 20, 500}) {
        for (const auto & [n_min, n_max] : std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {2, 5}, {2, 16}, {3, 8}}) {
            for (const std::size_t occ_max : {std::size_t(3), std::size_t(1000)}) {
                // Periodic stretches make long self-matches, random ones break them.
                std::vector<token_id> full;
                while (full.size() < 300) {
                    const std::size_t period = 1 + rng() % 7, reps = 1 + rng() % 6;
                    std::vector<token_id> unit;
                    for (std::size_t i = 0; i < period; ++i) {
                        unit.push_back(static_cast<token_id>(rng() % static_cast<unsigned>(n_vocab)));
                    }
                    for (std::size_t r = 0; r < reps; ++r) {
                        full.insert(full.end(), unit.begin(), unit.end());
                    }
                }
                context_matcher cm(n_min, n_max, occ_max);
                std::size_t     n = rng() % 10;
                // Half the runs reserve the whole context first (as the decoder does, before reset(); after a
                // first reset that left keys in the table): the same matches, and no growth while appending.
                const bool reserved = rng() % 2 == 0;
                if (reserved) {
                    cm.reset({full.data(), std::min<std::size_t>(full.size(), 40)});
                    cm.reserve(full.size());
                }
                cm.reset({full.data(), n});
                const token_id *  base  = cm.tokens().data();
                const std::size_t slots = cm.table_slots();
                while (true) {
                    if (reserved) {
                        ASSERT_EQ(cm.tokens().data(), base) << "the context moved after reserve()";
                        ASSERT_EQ(cm.table_slots(), slots) << "the hash table grew after reserve()";
                    }
                    cm.update();
                    const auto want = rest_ref::match_context({full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)},
                                                              n_min, n_max, occ_max, 4);
                    ASSERT_EQ(cm.match_len(), want.len)
                        << "vocab " << n_vocab << " n_min " << n_min << " n_max " << n_max << " length " << n;
                    const std::vector<std::size_t> got(cm.occurrences().begin(), cm.occurrences().end());
                    ASSERT_EQ(got, want.ends) << "occurrences at length " << n;
                    const auto rows = cm.continuation_rows(4);
                    ASSERT_EQ(rows.size(), want.conts.size() * 4);
                    for (std::size_t i = 0; i < want.conts.size(); ++i) {
                        for (std::size_t k = 0; k < 4; ++k) {
                            const token_id w = k < want.conts[i].size() ? want.conts[i][k] : k_doc_end;
                            ASSERT_EQ(rows[i * 4 + k], w) << "row " << i << " column " << k;
                        }
                    }
                    if (n == full.size()) {
                        break;
                    }
                    const std::size_t step = std::min(full.size() - n, 1 + rng() % 3);
                    cm.append({full.data() + n, step});
                    n += step;
                }
            }
        }
    }
}

// Several shards, of which only the longest match's are drafted from: sa_match_update_longest() must give the
// longest match over all shards and, for every shard whose match is that long, its exact range, while a shard left
// inexact must truly fall short of it. Against a scan of each shard, with shards of unequal sizes sharing text (so
// that they tie and differ), some empty, contexts with document ends, restarts (as a chain's search does), and fewer
// searches over all cases than bringing every shard up to date.
TEST(draft_search, longest_over_shards_equals_scan) {
    std::mt19937  rng(3);
    std::uint64_t n_lazy = 0, n_eager = 0;
    for (const corpus_case & c : k_cases) {
        for (const int n_shards : {1, 2, 3, 5}) {
            for (const int n_max : {0, 1, 2, 4, 16}) {
                for (const int n_min : {1, 2, 3}) {
                    const auto base = rest_ref::random_documents(rng, c.n_docs, c.len_max, c.n_vocab);
                    std::vector<std::unique_ptr<ref_shard>> refs;
                    std::vector<index_shard>                views;
                    std::vector<const std::vector<token_id> *> texts;
                    for (int s = 0; s < n_shards; ++s) {
                        // Each shard: a random share of the base documents plus documents of its own.
                        std::vector<std::vector<token_id>> docs;
                        for (const auto & d : base) {
                            if (rng() % (static_cast<unsigned>(s) + 2) == 0) docs.push_back(d);
                        }
                        const auto own = rest_ref::random_documents(rng, 1 + c.n_docs / (s + 1), c.len_max, c.n_vocab);
                        docs.insert(docs.end(), own.begin(), own.end());
                        if (s > 0 && rng() % 8 == 0) docs.clear();  // an empty shard
                        refs.push_back(std::make_unique<ref_shard>(rest_ref::join_documents(docs), c.width));
                        views.push_back(refs.back()->view());
                        texts.push_back(&refs.back()->text);
                    }
                    std::vector<token_id> full = wandering_context(rng, refs[0]->text, 300, c.n_vocab);
                    for (token_id & t : full) {
                        if (rng() % 50 == 0) t = k_doc_end;  // never matches
                    }
                    std::vector<sa_match>       lazy(views.size()), eager(views.size());
                    std::vector<sa_bigram_memo> memos(rng() % 4 == 0 ? 0 : views.size());  // none: searches from scratch
                    sa_match_counters           c_lazy, c_eager;
                    std::size_t                 seen = 0, n = rng() % 20;
                    while (true) {
                        const std::span<const token_id> ctx(full.data(), n);
                        if (rng() % 16 == 0) seen = 0;  // start over from a match that may be inexact
                        const int best = sa_match_update_longest(views, lazy, ctx, seen, n_max, n_min, &c_lazy, memos);
                        for (std::size_t i = 0; i < views.size(); ++i) {
                            sa_match_update(views[i], eager[i], ctx, seen, n_max, &c_eager);
                        }
                        seen = n;
                        // A suffix with a document end never occurs (the scan would match the separators).
                        int n_clean = 0;
                        while (n_clean < static_cast<int>(n) && ctx[n - 1 - static_cast<std::size_t>(n_clean)] >= 0) ++n_clean;
                        const int cap  = std::min(n_max, n_clean);
                        const int want = rest_ref::longest_suffix(texts, ctx, cap);
                        const std::string at = "vocab " + std::to_string(c.n_vocab) + " shards " +
                                               std::to_string(n_shards) + " n_max " + std::to_string(n_max) +
                                               " n_min " + std::to_string(n_min) + " context length " +
                                               std::to_string(n);
                        if (want < n_min) {
                            ASSERT_LE(best, want) << at;  // no shard reaches n_min: nothing is drafted
                        } else {
                            ASSERT_EQ(best, want) << at;
                        }
                        for (std::size_t i = 0; i < views.size(); ++i) {
                            const int own = rest_ref::longest_suffix({texts[i]}, ctx, cap);
                            const sa_match & m = lazy[i];
                            ASSERT_LE(m.len, own) << at << " shard " << i;
                            ASSERT_GE(m.ub, own) << at << " shard " << i;
                            ASSERT_LE(m.ub, std::min<int>(n_max, static_cast<int>(n))) << at << " shard " << i;
                            ASSERT_EQ(positions_in(views[i], m.range),
                                      m.len == 0 ? positions_in(views[i], views[i].full())
                                                 : rest_ref::occurrences(*texts[i], ctx.last(static_cast<std::size_t>(m.len))))
                                << at << " shard " << i;
                            if (want >= n_min && own == want) {
                                ASSERT_TRUE(m.exact()) << at << " shard " << i << " ties the longest: exact";
                            }
                            if (!m.exact() && want >= n_min) {
                                ASSERT_LT(own, want) << at << " shard " << i << " left inexact";
                            }
                        }
                        if (n == full.size()) {
                            break;
                        }
                        n = std::min(full.size(), n + 1 + rng() % 4);
                    }
                    n_lazy += c_lazy.n_find;
                    n_eager += c_eager.n_find;
                }
            }
        }
    }
    // Not a bound case by case (the probe at the longest length found is one search more where it occurs).
    EXPECT_LT(n_lazy, n_eager * 3 / 4) << "searches: " << n_lazy << " against " << n_eager;
}
