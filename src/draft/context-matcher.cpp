#include "context-matcher.h"

#include <algorithm>

namespace rest {

context_matcher::context_matcher(int n_min, int n_max, std::size_t n_occ_max, bool index) :
    n_min_(std::max(n_min, 1)),
    n_max_(std::max(n_max, std::max(n_min, 1))),
    n_occ_max_(std::max<std::size_t>(n_occ_max, 1)),
    index_(index) {}

void context_matcher::reset(std::span<const token_id> tokens) {
    ctx_.clear();
    head_min_.clear();
    head_max_.clear();
    prev_min_.clear();
    prev_max_.clear();
    n_indexed_ = 0;
    n_seen_    = 0;
    len_       = 0;
    truncated_ = false;
    occ_.clear();
    append(tokens);
}

std::uint64_t context_matcher::hash_ending_at(std::size_t p, int n) const {
    std::uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(n);
    for (int i = 0; i < n; ++i) {
        h = (h ^ static_cast<std::uint32_t>(ctx_[p - static_cast<std::size_t>(i)])) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    return h;
}

void context_matcher::index_position(std::size_t p) {
    const auto pos = static_cast<std::int32_t>(p);
    prev_min_.push_back(-1);
    prev_max_.push_back(-1);
    if (p + 1 >= static_cast<std::size_t>(n_min_)) {
        auto [it, fresh] = head_min_.try_emplace(hash_ending_at(p, n_min_), pos);
        if (!fresh) {
            prev_min_[p] = it->second;
            it->second   = pos;
        }
    }
    if (n_max_ > n_min_ && p + 1 >= static_cast<std::size_t>(n_max_)) {
        auto [it, fresh] = head_max_.try_emplace(hash_ending_at(p, n_max_), pos);
        if (!fresh) {
            prev_max_[p] = it->second;
            it->second   = pos;
        }
    }
}

void context_matcher::append(std::span<const token_id> tokens) {
    ctx_.insert(ctx_.end(), tokens.begin(), tokens.end());
    if (!index_) {
        return;
    }
    for (; n_indexed_ < ctx_.size(); ++n_indexed_) {
        index_position(n_indexed_);
    }
}

void context_matcher::update() {
    const std::size_t n = ctx_.size();
    if (n_seen_ == n || !index_) {
        return;
    }
    // Extension: an occurrence of the last len+1 tokens ends one past an occurrence of the previous last len
    // tokens, and occ_ holds all of those (when not truncated), so the new set is exact.
    bool ok = n_seen_ > 0 && len_ >= n_min_;
    for (std::size_t i = n_seen_; ok && i < n; ++i) {
        if (len_ >= n_max_ || truncated_) {
            ok = false;
            break;
        }
        const token_id t = ctx_[i];
        std::size_t    k = 0;
        for (const std::int32_t p : occ_) {
            if (ctx_[static_cast<std::size_t>(p) + 1] == t) {
                occ_[k++] = p + 1;
            }
        }
        occ_.resize(k);
        ok = k > 0;
        len_++;
    }
    n_seen_ = n;
    if (!ok) {
        search();
    }
}

void context_matcher::search() {
    const std::size_t n = ctx_.size();
    len_       = 0;
    truncated_ = false;
    occ_.clear();
    if (n < static_cast<std::size_t>(n_min_) + 1) {
        return;
    }
    auto same_suffix = [&](std::size_t p, int len) {  // c[p-len+1..p] == c[n-len..n-1]
        for (int i = 0; i < len; ++i) {
            if (ctx_[p - static_cast<std::size_t>(i)] != ctx_[n - 1 - static_cast<std::size_t>(i)]) {
                return false;
            }
        }
        return true;
    };
    // Chains run from the latest position down; found is reversed to ascending order at the end.
    std::vector<std::int32_t> found;
    if (n_max_ > n_min_ && n >= static_cast<std::size_t>(n_max_) + 1) {
        const auto it = head_max_.find(hash_ending_at(n - 1, n_max_));
        for (std::int32_t p = it == head_max_.end() ? -1 : it->second; p >= 0; p = prev_max_[static_cast<std::size_t>(p)]) {
            if (static_cast<std::size_t>(p) + 2 <= n && same_suffix(static_cast<std::size_t>(p), n_max_)) {
                found.push_back(p);
            }
        }
        if (!found.empty()) {
            len_ = n_max_;
        }
    }
    if (found.empty()) {
        const auto it = head_min_.find(hash_ending_at(n - 1, n_min_));
        for (std::int32_t p = it == head_min_.end() ? -1 : it->second; p >= 0; p = prev_min_[static_cast<std::size_t>(p)]) {
            if (static_cast<std::size_t>(p) + 2 > n) {
                continue;
            }
            const int cap = std::min<int>(n_max_, p + 1);
            int       l   = 0;
            while (l < cap && ctx_[static_cast<std::size_t>(p) - static_cast<std::size_t>(l)] ==
                                  ctx_[n - 1 - static_cast<std::size_t>(l)]) {
                ++l;
            }
            if (l < n_min_ || l < len_) {
                continue;
            }
            if (l > len_) {
                len_ = l;
                found.clear();
            }
            found.push_back(p);
        }
    }
    if (found.size() > n_occ_max_) {  // keep the most recent
        truncated_ = true;
        found.resize(n_occ_max_);
    }
    std::reverse(found.begin(), found.end());
    occ_.swap(found);
}

void context_matcher::continuation_rows(std::size_t width, std::vector<token_id> & rows) const {
    rows.clear();
    rows.reserve(occ_.size() * width);
    const std::size_t n = ctx_.size();
    for (const std::int32_t p : occ_) {
        for (std::size_t k = 0; k < width; ++k) {
            const std::size_t pos = static_cast<std::size_t>(p) + 1 + k;
            rows.push_back(pos < n ? ctx_[pos] : k_doc_end);
        }
    }
}

}  // namespace rest
