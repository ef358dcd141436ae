#include "text-stream.h"

#include <algorithm>

namespace {

// Bytes a UTF-8 sequence has, judged by its lead byte (1 for a stray continuation or invalid byte: never held).
std::size_t utf8_len(unsigned char c) {
    if (c < 0xC0) return 1;
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    if (c < 0xF8) return 4;
    return 1;
}

}  // namespace

text_stream::text_stream(std::vector<std::string> stops) : stops_(std::move(stops)) {
    for (const auto & s : stops_) {
        max_stop_ = std::max(max_stop_, s.size());
    }
}

bool text_stream::add(std::string_view piece) {
    if (stopped_ || final_) {
        return !stopped_;
    }
    const std::size_t old = text_.size();
    text_.append(piece);
    if (max_stop_ == 0) {
        return true;
    }
    // A new match must end inside the new piece, so it starts at most max_stop_ - 1 bytes before it.
    const std::size_t from = old >= max_stop_ ? old - max_stop_ + 1 : 0;
    std::size_t       cut  = std::string::npos;
    for (const auto & s : stops_) {
        cut = std::min(cut, text_.find(s, from));
    }
    if (cut != std::string::npos) {
        text_.resize(std::max(cut, taken_));  // held-back text never reaches taken_, so cut >= taken_
        stopped_ = true;
        return false;
    }
    return true;
}

std::size_t text_stream::safe_end() const {
    if (stopped_ || final_) {
        return text_.size();
    }
    std::size_t end = text_.size();
    for (const auto & s : stops_) {
        // Longest proper prefix of s that ends text_.
        for (std::size_t k = std::min(s.size() - 1, text_.size()); k > 0; --k) {
            if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
                end = std::min(end, text_.size() - k);
                break;
            }
        }
    }
    // Back off an incomplete UTF-8 sequence at the end.
    for (std::size_t back = 1; back <= 4 && back <= end; ++back) {
        const unsigned char c = (unsigned char) text_[end - back];
        if ((c & 0xC0) != 0x80) {  // a lead (or ASCII) byte
            if (utf8_len(c) > back) {
                end -= back;
            }
            break;
        }
    }
    return std::max(end, taken_);
}

std::string text_stream::take() {
    const std::size_t end = safe_end();
    std::string       out = text_.substr(taken_, end - taken_);
    taken_                = end;
    return out;
}

std::string text_stream::finish() {
    final_ = true;
    return take();
}
