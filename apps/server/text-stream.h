// Generated text as a client may see it: token pieces joined, cut at the first stop string, and released only
// when it can no longer change.
//
// Held back until later pieces decide: a tail that is a proper prefix of some stop string (the next piece may
// complete the stop, and the stop must never reach the client), and an incomplete UTF-8 sequence (byte tokens
// split characters; a stream must not emit half a character). finish() releases everything left.
#pragma once

#include <string>
#include <string_view>
#include <vector>

class text_stream {
  public:
    explicit text_stream(std::vector<std::string> stops = {});

    // Appends a piece. Returns false once a stop string has matched: the text is cut where the stop begins and
    // further pieces are ignored.
    bool add(std::string_view piece);
    // Text released since the last take() (or finish()).
    std::string take();
    // Releases the held-back tail too (the generation ended) and returns what was not taken yet.
    std::string finish();

    bool               stopped() const { return stopped_; }
    const std::string & text() const { return text_; }  // everything so far, cut at a stop
    std::size_t         released() const { return taken_; }  // bytes of text() returned so far

  private:
    std::size_t safe_end() const;

    std::vector<std::string> stops_;
    std::size_t              max_stop_ = 0;  // longest stop string, bytes
    std::string              text_;
    std::size_t              taken_   = 0;  // bytes of text_ already returned
    bool                     stopped_ = false;
    bool                     final_   = false;
};
