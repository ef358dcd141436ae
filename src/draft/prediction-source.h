// The prediction draft source: a text the caller expects the output to repeat, with edits (OpenAI's predicted
// outputs). Per request; the drafter owns one.
//
// Alignment (what tests/ref/ref-draft.h's naive_prediction_align checks): the source keeps s, the index in the
// prediction p[0..L-1] where it expects the next output token (0 at the start). After each output token, with o
// the output so far (the prompt is not part of it):
//   - m = the largest k <= n_match_max such that o's last k tokens occur in p (0 when its last token occurs nowhere);
//   - if m > 0, s becomes the continuation (the index after the occurrence's end) of the occurrence of that suffix
//     whose continuation is nearest to s + 1, ties to the later one (the output moves forward); but a single token
//     (m == 1) is trusted only within k_near positions of s + 1 (a common token occurs all over a text, and edits
//     are short): farther, it counts as no match (m = 0);
//   - if m == 0, s = min(s + 1, L): an unknown token is taken for a substitution, the text goes on after it.
// The draft is the chain p[s], p[s+1], ... The rule re-finds the place after an insertion (the first token after
// it occurs one position back), a deletion (a few positions on) and a substitution (right there), and the
// nearest-occurrence tie-break keeps a prediction that repeats itself on the repetition it is following.
//
// Search: a token that continues the alignment costs O(1). Otherwise the longest suffix is found in an in-memory
// suffix array of the prediction by the same match as the datastore's (sa-search.h), O(n_match_max log L); a single
// token's candidates are read in the 2 k_near + 1 positions around s + 1, a longer match's occurrences all (few).
#pragma once

#include "sa-search.h"
#include "tree-expand.h"

#include "rest/index-shard.h"
#include "rest/types.h"

#include <cstdint>
#include <span>
#include <vector>

namespace rest {

class prediction_source {
  public:
    static constexpr std::int64_t k_near = 8;
    static constexpr double       k_prior_hits = 8;  // see conditional_score()

    explicit prediction_source(int n_match_max = 32);
    prediction_source(const prediction_source &) = delete;
    prediction_source & operator=(const prediction_source &) = delete;

    // A new request with this prediction (empty: the source drafts nothing).
    void reset(std::span<const token_id> prediction);
    // Output tokens, in order.
    void append(std::span<const token_id> tokens);

    bool         active() const { return !pred_.empty(); }
    std::int64_t start() const { return s_; }  // where the draft begins in the prediction (s above)
    int          match_len() const { return m_; }
    std::size_t  size() const { return pred_.empty() ? 0 : pred_.size() - 1; }  // L

    // The conditional score of a drafted token that follows `run` tokens in a row of the prediction: how often the
    // prediction's expected token was the output's in this request after such a run (runs of 0, 1, 2-3, 4-7, 8-15,
    // 16+ tokens), shrunk towards its hit rate overall, (hits + k_prior_hits + 1) / (tokens + k_prior_hits + 3): a
    // prior that trusts the caller's text (0.82 before any token). An exact prediction earns scores
    // near 1 within a few tokens; an edited one is trusted along a run and not right after an edit; an unrelated
    // one sinks below the other sources (under 0.3 after 3 wrong tokens), so its chain does not displace
    // theirs as the best path.
    double conditional_score(std::int64_t run) const;
    std::int64_t run() const { return run_; }  // output tokens in a row that were the prediction's expected ones
    // The chain p[s .. s + n - 1] (cut at the prediction's end) as a candidate tree; the node at depth d has the
    // conditional score for a run of run() + d - 1.
    const cand_tree & draft(int n, cand_tree & out) const;

  private:
    void advance(token_id t);

    int                        n_match_max_;
    std::vector<std::uint32_t> pred_;  // the prediction and a separator (the shard's text)
    std::vector<std::uint32_t> sa_;
    index_shard                shard_;
    std::vector<token_id>      out_;   // the output so far
    sa_match                   match_;
    std::int64_t               s_ = 0;
    int                        m_ = 0;
    std::int64_t               hits_ = 0;  // output tokens that were the prediction's at s
    std::int64_t               run_  = 0;  // ... in a row, up to the last token
    static constexpr int       k_runs = 6;
    static int                 run_class(std::int64_t run);
    std::int64_t               run_hits_[k_runs] = {};
    std::int64_t               run_tokens_[k_runs] = {};
    bool                       far_ = false;  // the last token's longest match was a far single token, not taken
};

}  // namespace rest
