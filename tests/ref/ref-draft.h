// Naive references for drafting: brute-force scans over plain token vectors, written for obviousness, not speed.
//
// A corpus text is a vector of tokens with k_doc_end separators between documents. Occurrences are found by
// comparing the pattern at every position; continuations by walking forward to the next separator.
#pragma once

#include "rest/datastore.h"
#include "rest/index-shard.h"
#include "rest/types.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace rest_ref {

using rest::k_doc_end;
using rest::token_id;
using path_t = std::vector<token_id>;

// Documents joined with separators (each document followed by one).
inline std::vector<token_id> join_documents(const std::vector<std::vector<token_id>> & docs) {
    std::vector<token_id> text;
    for (const auto & d : docs) {
        text.insert(text.end(), d.begin(), d.end());
        text.push_back(k_doc_end);
    }
    return text;
}

// Suffix order of index_shard: past the end sorts first, a separator after every token.
inline std::uint64_t sort_key(const std::vector<token_id> & text, std::size_t pos) {
    if (pos >= text.size()) {
        return 0;
    }
    return text[pos] == k_doc_end ? UINT64_MAX : static_cast<std::uint64_t>(text[pos]) + 1;
}

// Whether the suffix at a sorts before the one at b, token by token.
inline bool suffix_less(const std::vector<token_id> & text, std::size_t a, std::size_t b) {
    for (std::size_t k = 0;; ++k) {
        const std::uint64_t x = sort_key(text, a + k), y = sort_key(text, b + k);
        if (x != y) {
            return x < y;
        }
        if (x == 0) {
            return false;  // both ran off the end: equal (only possible when a == b)
        }
    }
}

// Suffix array by sorting positions with a token-by-token comparison; suffixes starting with a separator are left
// out, as in a datastore.
inline std::vector<std::uint32_t> naive_suffix_array(const std::vector<token_id> & text) {
    std::vector<std::uint32_t> sa;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != k_doc_end) {
            sa.push_back(static_cast<std::uint32_t>(i));
        }
    }
    std::sort(sa.begin(), sa.end(), [&](std::uint32_t a, std::uint32_t b) { return suffix_less(text, a, b); });
    return sa;
}

// A text with its suffix array, stored at token width 2 or 4, and an index_shard view over them.
struct ref_shard {
    std::vector<token_id>      text;
    std::vector<std::uint16_t> t16;
    std::vector<std::uint32_t> t32;
    std::vector<std::uint32_t> sa;
    int                        width = 2;

    ref_shard(std::vector<token_id> text_, int width_) : text(std::move(text_)), width(width_) {
        sa = naive_suffix_array(text);
        for (const token_id t : text) {
            t16.push_back(t == k_doc_end ? 0xFFFF : static_cast<std::uint16_t>(t));
            t32.push_back(t == k_doc_end ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t));
        }
    }
    ref_shard(const ref_shard &) = delete;

    // The suffix samples an index file carries (index-format.h), built naively: the first sample_tokens() tokens of
    // every sample_step()-th suffix, a separator past its document's or the text's end. view() then installs them.
    void add_samples() {
        const std::uint64_t step = rest::index_shard::sample_step();
        const std::size_t   w    = rest::index_shard::sample_tokens();
        for (std::size_t j = 0; j * step < sa.size(); ++j) {
            bool ended = false;
            for (std::size_t d = 0; d < w; ++d) {
                const std::size_t pos = sa[j * step] + d;
                ended                 = ended || pos >= text.size() || text[pos] == k_doc_end;
                s16.push_back(ended ? 0xFFFF : static_cast<std::uint16_t>(text[pos]));
                s32.push_back(ended ? 0xFFFFFFFFu : static_cast<std::uint32_t>(text[pos]));
            }
        }
    }
    std::vector<std::uint16_t> s16;
    std::vector<std::uint32_t> s32;

    rest::index_shard view() const {
        const void * p = width == 2 ? static_cast<const void *>(t16.data()) : static_cast<const void *>(t32.data());
        rest::index_shard v(p, text.size(), sa.data(), sa.size(), width);
        if (!s16.empty()) {
            v.set_sample_table(width == 2 ? static_cast<const void *>(s16.data()) : static_cast<const void *>(s32.data()),
                               s16.size() / rest::index_shard::sample_tokens());
        }
        return v;
    }
};

// Positions where pattern starts in text (the pattern holds no separator).
inline std::vector<std::size_t> occurrences(const std::vector<token_id> & text, std::span<const token_id> pattern) {
    std::vector<std::size_t> occ;
    for (std::size_t i = 0; i + pattern.size() <= text.size(); ++i) {
        if (std::equal(pattern.begin(), pattern.end(), text.begin() + static_cast<std::ptrdiff_t>(i))) {
            occ.push_back(i);
        }
    }
    return occ;
}

// The longest suffix of ctx (at most n_max tokens) that occurs in any of the texts; 0 when none.
inline int longest_suffix(const std::vector<const std::vector<token_id> *> & texts, std::span<const token_id> ctx,
                          int n_max) {
    for (int k = std::min<int>(n_max, static_cast<int>(ctx.size())); k > 0; --k) {
        for (const auto * t : texts) {
            if (!occurrences(*t, ctx.last(static_cast<std::size_t>(k))).empty()) {
                return k;
            }
        }
    }
    return 0;
}

// Every prefix (depth 1..depth_max) of every continuation, counted.
inline std::map<path_t, std::uint64_t> count_prefixes(const std::vector<path_t> & continuations, int depth_max) {
    std::map<path_t, std::uint64_t> counts;
    for (const path_t & c : continuations) {
        path_t p;
        for (std::size_t i = 0; i < c.size() && static_cast<int>(i) < depth_max && c[i] != k_doc_end; ++i) {
            p.push_back(c[i]);
            counts[p]++;
        }
    }
    return counts;
}

// Continuations after every occurrence of pattern in the texts, up to depth_max tokens or the document's end.
// The tokens from text position `from` on, up to depth_max of them or the document's end.
inline path_t continuation_at(const std::vector<token_id> & text, std::size_t from, int depth_max) {
    path_t c;
    for (std::size_t j = from; j < text.size() && text[j] != k_doc_end && static_cast<int>(c.size()) < depth_max; ++j) {
        c.push_back(text[j]);
    }
    return c;
}

inline std::vector<path_t> continuations(const std::vector<const std::vector<token_id> *> & texts,
                                         std::span<const token_id> pattern, int depth_max) {
    std::vector<path_t> out;
    for (const auto * t : texts) {
        for (const std::size_t i : occurrences(*t, pattern)) {
            out.push_back(continuation_at(*t, i + pattern.size(), depth_max));
        }
    }
    return out;
}

// The continuations expand_sa reads (src/draft/tree-expand.h): after every occurrence of pattern, texts in order
// and each text's occurrences in suffix order; or, with more than scan_max (at least 1) of them, after the ones at
// (2j + 1) n / (2 scan_max) for j < scan_max, the middles of equal strides. n_total counts all occurrences.
struct sampled_continuations {
    std::vector<path_t> conts;
    std::uint64_t       n_total = 0;
};

inline sampled_continuations sample_continuations(const std::vector<const std::vector<token_id> *> & texts,
                                                  std::span<const token_id> pattern, int depth_max,
                                                  std::uint64_t scan_max) {
    std::vector<std::pair<const std::vector<token_id> *, std::size_t>> occ;
    for (const auto * t : texts) {
        std::vector<std::size_t> pos = occurrences(*t, pattern);
        std::sort(pos.begin(), pos.end(), [&](std::size_t a, std::size_t b) { return suffix_less(*t, a, b); });
        for (const std::size_t p : pos) occ.push_back({t, p});
    }
    sampled_continuations s;
    s.n_total             = occ.size();
    const std::uint64_t m = std::min<std::uint64_t>(s.n_total, std::max<std::uint64_t>(1, scan_max));
    for (std::uint64_t j = 0; j < m; ++j) {
        const auto & [t, i] = occ[((2 * j + 1) * s.n_total) / (2 * m)];
        s.conts.push_back(continuation_at(*t, i + pattern.size(), depth_max));
    }
    return s;
}

// Every prefix of the sampled continuations counted, each row standing for its share of all occurrences (rounded).
inline std::map<path_t, std::uint64_t> count_prefixes(const sampled_continuations & s, int depth_max) {
    std::map<path_t, std::uint64_t> counts = count_prefixes(s.conts, depth_max);
    const std::uint64_t             n = s.n_total, m = s.conts.size();
    if (n != m) {
        for (auto & [p, c] : counts) c = (2 * c * n + m) / (2 * m);
    }
    return counts;
}

struct node {
    path_t        path;
    std::uint64_t count = 0;
    double        score = 0;
};

// Scores every node: the product along the path of count / (parent count + alpha), the same expression (and
// order of operations) as the implementation, so equal counts give bit-equal scores.
inline std::vector<node> score_all(const std::map<path_t, std::uint64_t> & counts, std::uint64_t root_count,
                                   double alpha) {
    std::vector<node>        out;
    std::map<path_t, double> score;
    for (const auto & [p, c] : counts) {  // map order visits a prefix before its extensions
        const path_t        parent(p.begin(), p.end() - 1);
        const double        ps = parent.empty() ? 1.0 : score.at(parent);
        const std::uint64_t pc = parent.empty() ? root_count : counts.at(parent);
        const double        s  = ps * (static_cast<double>(c) / (static_cast<double>(pc) + alpha));
        score[p] = s;
        out.push_back({p, c, s});
    }
    return out;
}

// Score descending, depth ascending, path ascending.
inline bool before(const node & a, const node & b) {
    if (a.score != b.score) {
        return a.score > b.score;
    }
    if (a.path.size() != b.path.size()) {
        return a.path.size() < b.path.size();
    }
    return a.path < b.path;
}

inline std::vector<node> top(std::vector<node> nodes, int n) {
    std::sort(nodes.begin(), nodes.end(), before);
    nodes.resize(std::min<std::size_t>(nodes.size(), static_cast<std::size_t>(std::max(n, 0))));
    return nodes;
}

// Context source: the largest k in [n_min, n_max] such that the last k tokens also end at some p <= L-2; the
// occurrences (the most recent occ_max) and their continuations (up to the context's end).
struct context_match {
    int                      len = 0;
    std::vector<std::size_t> ends;
    std::vector<path_t>      conts;
};

inline context_match match_context(const std::vector<token_id> & c, int n_min, int n_max, std::size_t occ_max,
                                   int depth_max) {
    context_match m;
    const std::size_t L = c.size();
    for (int k = n_max; k >= n_min && m.len == 0; --k) {
        for (std::size_t p = static_cast<std::size_t>(k) - 1; p + 2 <= L; ++p) {
            if (std::equal(c.begin() + static_cast<std::ptrdiff_t>(p + 1 - static_cast<std::size_t>(k)),
                           c.begin() + static_cast<std::ptrdiff_t>(p + 1),
                           c.end() - k)) {
                m.len = k;
                m.ends.push_back(p);
            }
        }
    }
    if (m.ends.size() > occ_max) {
        m.ends.erase(m.ends.begin(), m.ends.end() - static_cast<std::ptrdiff_t>(occ_max));
    }
    for (const std::size_t p : m.ends) {
        path_t cont;
        for (std::size_t j = p + 1; j < L && static_cast<int>(cont.size()) < depth_max; ++j) {
            cont.push_back(c[j]);
        }
        m.conts.push_back(cont);
    }
    return m;
}

// Random documents: tokens drawn from a skewed distribution over n_vocab so that repeats are common.
inline std::vector<std::vector<token_id>> random_documents(std::mt19937 & rng, int n_docs, int len_max,
                                                           int n_vocab) {
    std::vector<std::vector<token_id>> docs(static_cast<std::size_t>(n_docs));
    std::uniform_int_distribution<int> len(1, len_max);
    std::geometric_distribution<int>   geo(n_vocab <= 4 ? 0.5 : 4.0 / n_vocab);
    for (auto & d : docs) {
        const int n = len(rng);
        for (int i = 0; i < n; ++i) {
            d.push_back(std::min(geo(rng), n_vocab - 1));
        }
    }
    return docs;
}

// The prediction source's alignment (src/draft/prediction-source.h), by brute force: after each output token, the
// longest suffix (at most n_max tokens) of the output that occurs in the prediction, compared at every position;
// among its occurrences the one whose continuation is nearest to s + 1 (ties: the later), a single-token match only
// within `near` positions; with none, s + 1 capped at the prediction's length. Returns s after each token.
struct prediction_alignment {
    std::vector<std::int64_t> start;  // s after each output token
    std::vector<int>          len;    // m after each output token
};

inline prediction_alignment naive_prediction_align(const std::vector<token_id> & pred, const std::vector<token_id> & out,
                                                   int n_max, std::int64_t near = 8) {
    prediction_alignment a;
    const auto   L = static_cast<std::int64_t>(pred.size());
    std::int64_t s = 0;
    for (std::size_t n = 1; n <= out.size(); ++n) {
        int                       m = 0;
        std::vector<std::int64_t> conts;
        for (int k = std::min<int>(n_max, static_cast<int>(n)); k >= 1 && m == 0; --k) {
            for (std::int64_t q = 0; q + k <= L; ++q) {
                if (std::equal(out.begin() + static_cast<std::ptrdiff_t>(n - k), out.begin() + static_cast<std::ptrdiff_t>(n),
                               pred.begin() + q)) {
                    m = k;
                    conts.push_back(q + k);
                }
            }
        }
        if (m == 0) {
            s = std::min(s + 1, L);
        } else {
            std::int64_t best = conts[0];
            for (const std::int64_t c : conts) {
                const std::int64_t dc = std::abs(c - (s + 1)), db = std::abs(best - (s + 1));
                if (dc < db || (dc == db && c > best)) best = c;
            }
            if (m == 1 && std::abs(best - (s + 1)) > near) {
                m = 0;
                s = std::min(s + 1, L);
            } else {
                s = best;
            }
        }
        a.start.push_back(s);
        a.len.push_back(m);
    }
    return a;
}

// A datastore over random in-memory shards, alternately of token width 2 and 4 (the drafter only needs shards()),
// with the plain texts for the naive references above.
class memory_datastore final : public rest::datastore {
  public:
    memory_datastore(std::mt19937 & rng, int n_shards, int n_docs, int len_max, int n_vocab) {
        for (int i = 0; i < n_shards; ++i) {
            const auto docs = random_documents(rng, n_docs, len_max, n_vocab);
            shards_ref_.push_back(std::make_unique<ref_shard>(join_documents(docs), (i % 2) ? 4 : 2));
            views_.push_back(shards_ref_.back()->view());
            info_.n_tokens += shards_ref_.back()->sa.size();
        }
        info_.n_shards = views_.size();
    }
    const rest::datastore_info &       info() const override { return info_; }
    std::span<const rest::index_shard> shards() const override { return views_; }
    void                               verify() const override {}

    std::vector<const std::vector<token_id> *> texts() const {
        std::vector<const std::vector<token_id> *> t;
        for (const auto & s : shards_ref_) t.push_back(&s->text);
        return t;
    }

  private:
    std::vector<std::unique_ptr<ref_shard>> shards_ref_;
    std::vector<rest::index_shard>          views_;
    rest::datastore_info                    info_;
};

}  // namespace rest_ref
