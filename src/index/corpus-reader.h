// Reading a corpus into documents (strings), before tokenization.
//
// Inputs are listed up front (list_corpus_files), so a missing path fails before any work. Documents come out in a
// deterministic order: inputs in command-line order, directory entries sorted by name, records in file order.
#pragma once

#include "rest/index-builder.h"
#include "rest/tokenizer.h"
#include "rest/utf8.h"

#include <cstdint>
#include <fstream>
#include <nlohmann/json_fwd.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace rest {

struct corpus_file {
    std::string   path;  // "-" for stdin
    std::uint64_t size = 0;  // bytes; 0 for stdin
};

// Expands directories (recursively, name order, symlinked directories not followed) and filters their files by
// params.include. Explicitly named files are always taken. Throws user_error for a path that does not exist.
std::vector<corpus_file> list_corpus_files(const std::vector<std::string> & inputs, const corpus_params & params);

struct corpus_document {
    std::string           text;
    bool                  parse_special = false;  // chat renderings contain control tokens as text
    bool                  pretokenized  = false;  // a JSONL field held token ids: `tokens` is the document
    std::vector<token_id> tokens;
};

class corpus_reader {
  public:
    // tok is used only for chat rendering; it must outlive the reader.
    corpus_reader(std::vector<corpus_file> files, const corpus_params & params, const tokenizer & tok,
                  std::function<void(const std::string &)> on_warning);
    ~corpus_reader();

    // Appends documents to out until about max_bytes of text were added or the corpus ends. Returns false when
    // nothing was added (end of corpus). Throws user_error for bad JSON records, naming file and line.
    bool next(std::vector<corpus_document> & out, std::size_t max_bytes);

    std::uint64_t bytes_read() const { return bytes_read_; }
    std::uint64_t n_files() const { return n_files_; }
    std::uint64_t n_skipped() const { return n_skipped_; }

  private:
    void        open_next_file();
    std::string read_whole(const corpus_file & f);
    void        add_text_file(const std::string & content, std::vector<corpus_document> & out, std::size_t & added);
    void        add_line(const std::string & line, std::vector<corpus_document> & out, std::size_t & added);
    void        add_record(const nlohmann::json & rec, const std::string & where, std::vector<corpus_document> & out,
                           std::size_t & added);

    std::vector<corpus_file>                 files_;
    corpus_params                            params_;
    const tokenizer &                        tok_;
    std::function<void(const std::string &)> on_warning_;
    std::size_t                              next_file_ = 0;
    // JSONL state: the open file (or stdin) and its line number.
    std::unique_ptr<std::ifstream> in_file_;
    std::istream *                 in_      = nullptr;
    std::string                    in_path_;
    std::uint64_t                  line_no_ = 0;
    std::uint64_t                  bytes_read_ = 0;
    std::uint64_t                  n_files_    = 0;
    std::uint64_t                  n_skipped_  = 0;
};

}  // namespace rest
