#include "context-matcher.h"

#include <algorithm>

namespace rest {

namespace {

inline std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    h = (h ^ v) * 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 32);
}

}  // namespace

context_matcher::context_matcher(int n_min, int n_max, std::size_t n_occ_max, bool index) :
    n_min_(std::max(n_min, 1)),
    n_max_(std::max(n_max, std::max(n_min, 1))),
    n_occ_max_(std::max<std::size_t>(n_occ_max, 1)),
    index_(index) {}

void context_matcher::reset(std::span<const token_id> tokens) {
    ctx_.clear();
    std::fill(keys_.begin(), keys_.end(), 0);
    n_keys_ = 0;
    prev_.clear();
    n_indexed_ = 0;
    n_seen_    = 0;
    len_       = 0;
    truncated_ = false;
    occ_.clear();
    append(tokens);
}

// The same key index_position() computes incrementally.
std::uint64_t context_matcher::key_ending_at(std::size_t p, int k) const {
    std::uint64_t h = 0;
    for (int i = 0; i < k; ++i) {
        h = mix(h, static_cast<std::uint32_t>(ctx_[p - static_cast<std::size_t>(i)]));
    }
    return mix(h, 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(k)) | 1;
}

std::int32_t context_matcher::head(std::uint64_t key) const {
    if (keys_.empty()) {
        return -1;
    }
    const std::size_t mask = keys_.size() - 1;
    for (std::size_t i = (key >> 7) & mask;; i = (i + 1) & mask) {
        if (keys_[i] == key) {
            return heads_[i];
        }
        if (keys_[i] == 0) {
            return -1;
        }
    }
}

void context_matcher::rehash(std::size_t n_slots) {
    std::vector<std::uint64_t> old_keys(n_slots, 0);
    std::vector<std::int32_t>  old_heads(n_slots, -1);
    old_keys.swap(keys_);
    old_heads.swap(heads_);
    const std::size_t mask = keys_.size() - 1;
    for (std::size_t j = 0; j < old_keys.size(); ++j) {
        if (old_keys[j] != 0) {
            std::size_t i = (old_keys[j] >> 7) & mask;
            while (keys_[i] != 0) {
                i = (i + 1) & mask;
            }
            keys_[i]  = old_keys[j];
            heads_[i] = old_heads[j];
        }
    }
}

void context_matcher::reserve(std::size_t n_tokens) {
    ctx_.reserve(n_tokens);
    if (!index_) {
        return;
    }
    const auto n_len = static_cast<std::size_t>(n_max_ - n_min_ + 1);
    prev_.reserve(n_tokens * n_len);
    std::size_t n_slots = std::max<std::size_t>(1024, keys_.size());
    while (n_slots < 2 * (n_tokens * n_len + 1)) {
        n_slots *= 2;
    }
    if (n_slots > keys_.size()) {
        rehash(n_slots);
    }
}

void context_matcher::set_head(std::uint64_t key, std::int32_t p) {
    if (2 * (n_keys_ + 1) > keys_.size()) {
        rehash(std::max<std::size_t>(1024, 2 * keys_.size()));
    }
    const std::size_t mask = keys_.size() - 1;
    std::size_t       i    = (key >> 7) & mask;
    while (keys_[i] != 0 && keys_[i] != key) {
        i = (i + 1) & mask;
    }
    if (keys_[i] == 0) {
        keys_[i] = key;
        n_keys_++;
    }
    heads_[i] = p;
}

void context_matcher::index_position(std::size_t p) {
    const auto n_len = static_cast<std::size_t>(n_max_ - n_min_ + 1);
    prev_.resize((p + 1) * n_len, -1);
    std::uint64_t h = 0;
    for (int k = 1; k <= n_max_ && static_cast<std::size_t>(k) <= p + 1; ++k) {
        h = mix(h, static_cast<std::uint32_t>(ctx_[p + 1 - static_cast<std::size_t>(k)]));
        if (k < n_min_) {
            continue;
        }
        const std::uint64_t key = mix(h, 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(k)) | 1;
        prev_[p * n_len + static_cast<std::size_t>(k - n_min_)] = head(key);
        set_head(key, static_cast<std::int32_t>(p));
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

bool context_matcher::same_suffix(std::size_t p, int k) const {
    const std::size_t n = ctx_.size();
    for (int i = 0; i < k; ++i) {
        if (ctx_[p - static_cast<std::size_t>(i)] != ctx_[n - 1 - static_cast<std::size_t>(i)]) {
            return false;
        }
    }
    return true;
}

// The first candidate at or after `from` in the chain of length k that is a real earlier occurrence, or -1.
std::int32_t context_matcher::first_verified(int k, std::int32_t from, std::size_t n) const {
    const auto n_len = static_cast<std::size_t>(n_max_ - n_min_ + 1);
    for (std::int32_t p = from; p >= 0; p = prev_[static_cast<std::size_t>(p) * n_len + static_cast<std::size_t>(k - n_min_)]) {
        if (static_cast<std::size_t>(p) + 2 <= n && same_suffix(static_cast<std::size_t>(p), k)) {
            return p;
        }
    }
    return -1;
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
    auto head_of = [&](int k) { return head(key_ending_at(n - 1, k)); };
    // Largest k in [n_min, hi] that occurs earlier; occurrence is monotone in k.
    int lo = n_min_ - 1, hi = static_cast<int>(std::min<std::size_t>(n_max_, n - 1));
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (first_verified(mid, head_of(mid), n) >= 0) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    if (lo < n_min_) {
        return;
    }
    len_             = lo;
    const auto n_len = static_cast<std::size_t>(n_max_ - n_min_ + 1);
    for (std::int32_t p = first_verified(lo, head_of(lo), n); p >= 0;) {
        if (occ_.size() == n_occ_max_) {  // one more exists: the set is cut
            truncated_ = true;
            break;
        }
        occ_.push_back(p);
        p = first_verified(lo, prev_[static_cast<std::size_t>(p) * n_len + static_cast<std::size_t>(lo - n_min_)], n);
    }
    std::reverse(occ_.begin(), occ_.end());
}

std::uint64_t context_matcher::key_of(std::span<const token_id> pattern) const {
    std::uint64_t h = 0;
    for (std::size_t i = pattern.size(); i-- > 0;) {
        h = mix(h, static_cast<std::uint32_t>(pattern[i]));
    }
    return mix(h, 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(pattern.size())) | 1;
}

std::int32_t context_matcher::next_pattern(std::span<const token_id> pattern, std::int32_t from) const {
    const auto        k     = static_cast<int>(pattern.size());
    const auto        n_len = static_cast<std::size_t>(n_max_ - n_min_ + 1);
    const std::size_t n     = ctx_.size();
    for (std::int32_t p = from; p >= 0; p = prev_[static_cast<std::size_t>(p) * n_len + static_cast<std::size_t>(k - n_min_)]) {
        if (static_cast<std::size_t>(p) + 2 <= n && std::equal(pattern.begin(), pattern.end(), ctx_.begin() + (p + 1 - k))) {
            return p;
        }
    }
    return -1;
}

bool context_matcher::find(std::span<const token_id> pattern, std::vector<std::int32_t> & occ) const {
    occ.clear();
    const auto k = static_cast<int>(pattern.size());
    if (!index_ || k < n_min_ || k > n_max_) {
        return true;
    }
    const auto n_len = static_cast<std::size_t>(n_max_ - n_min_ + 1);
    bool       whole = true;
    for (std::int32_t p = next_pattern(pattern, head(key_of(pattern))); p >= 0;) {
        if (occ.size() == n_occ_max_) {
            whole = false;
            break;
        }
        occ.push_back(p);
        p = next_pattern(pattern, prev_[static_cast<std::size_t>(p) * n_len + static_cast<std::size_t>(k - n_min_)]);
    }
    std::reverse(occ.begin(), occ.end());
    return whole;
}

int context_matcher::longest(std::span<const token_id> text) const {
    if (!index_) {
        return 0;
    }
    auto occurs = [&](int k) {
        const auto pat = text.last(static_cast<std::size_t>(k));
        return next_pattern(pat, head(key_of(pat))) >= 0;
    };
    int lo = n_min_ - 1, hi = static_cast<int>(std::min<std::size_t>(n_max_, text.size()));
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (occurs(mid)) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo < n_min_ ? 0 : lo;
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
