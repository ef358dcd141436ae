// Building datastores. The builder is separate from the reader (datastore.h).
//
// Two levels: index_builder turns tokenized documents into a datastore file (suffix sort, sharding, checksums,
// atomic write); build_datastore() reads a corpus (files, directories, stdin; text, JSONL or chat records),
// tokenizes it in parallel through the tokenizer interface and feeds an index_builder.
#pragma once

#include "rest/datastore.h"
#include "rest/tokenizer.h"
#include "rest/types.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace rest {

struct tokenizer_identity {
    std::uint64_t fingerprint = 0;
    std::string   description;
    std::int32_t  n_vocab = 0;  // decides the token width: u16 when n_vocab < 65535, else u32
};

enum class build_phase { tokenize, sort, write };

struct build_progress {
    build_phase   phase    = build_phase::tokenize;
    std::uint64_t done     = 0;  // tokenize: input bytes read; sort: shards sorted; write: bytes written
    std::uint64_t total    = 0;  // same unit as done; 0 when unknown (stdin)
    std::uint64_t n_tokens = 0;  // corpus tokens so far, separators excluded
    std::size_t   shard    = 0;  // shard being sorted or written
};

using build_progress_fn = std::function<void(const build_progress &)>;

struct index_builder_params {
    std::uint64_t     n_shard_tokens_max = 0;  // tokens per shard, separators included; 0 = one suffix array's reach
                                               // (about 2^30 for u16). Peak memory is ~10 bytes x this for u16.
    build_progress_fn on_progress;             // called on the thread that calls the builder
    // Append: an existing datastore (possibly `path` itself) whose shards come first, checked (datastore::verify)
    // and copied byte for byte; new documents go into new shards after them. Its tokenizer must be the builder's
    // (user_error otherwise). "" builds a new datastore.
    std::string       base;
    // Append: only the base's first this many shards are copied (append_merging() re-adds the others' documents).
    std::size_t       base_shards = SIZE_MAX;
};

// Streams tokenized documents into a datastore file. Tokens are kept in memory one shard at a time: when the next
// document does not fit, the shard is suffix-sorted and appended to a temp file next to `path`. finish() writes the
// header and renames the temp file over `path`; destroying an unfinished builder removes the temp file.
class index_builder {
  public:
    index_builder(const std::string & path, const tokenizer_identity & tok, const index_builder_params & params = {});
    ~index_builder();
    index_builder(const index_builder &) = delete;
    index_builder & operator=(const index_builder &) = delete;

    // Every token must be in [0, n_vocab) (std::invalid_argument otherwise). An empty document is ignored. A document
    // longer than a shard is split across shards (continuations stop at the split).
    void add_document(std::span<const token_id> tokens);

    // Throws user_error("empty corpus ...") when no token was added.
    datastore_info finish();

    const std::string & temp_path() const;  // where the file is written until finish(): datastore_temp_path(path)
    double t_sort_s() const;                // seconds in suffix sorting
    double t_sort_cpu_s() const;            // CPU seconds of the sorting thread (differs from t_sort_s under load)
    double t_write_s() const;               // seconds writing (encoding, hashing, I/O)

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// Merges a datastore's shards into as few as the shard cap allows (params.n_shard_tokens_max; 0: a suffix array's
// reach), rewriting `path` atomically: fewer shards, fewer searches per lookup. Documents and their order are kept;
// one that an earlier build split across shards stays split. Returns the new file's info.
datastore_info compact_datastore(const std::string & path, const index_builder_params & params = {});

// Appends documents to the datastore at `path` (built when there is none), atomically, merging its smaller trailing
// shards with them into new ones: from the end, a shard is merged while it holds at most twice the tokens merged
// after it. Shard sizes then stay geometric, so a store grown by many small appends (the server's named corpora, one
// document per request) keeps about log2(tokens) shards, where plain appends would add one per call and every
// lookup searches each; each token is re-sorted O(log) times over all appends. params.base is ignored.
datastore_info append_merging(const std::string & path, std::span<const std::vector<token_id>> documents,
                              const tokenizer_identity & tok, const index_builder_params & params = {});

// The temp file a build of `path` writes in this process (path + ".tmp." + pid), so a front end's signal handler
// can remove it when the build is interrupted.
std::string datastore_temp_path(const std::string & path);
// PATH.lock, held by every writer of an index file while it writes (rest index build, append and compact; the
// server's corpora): two writers would each rename their file over the path, and the last would drop the other's
// documents. Released when destroyed (or the process ends). Throws user_error when the lock file cannot be
// created, or, not waiting, when another process holds it.
class index_write_lock {
  public:
    enum class wait { no, yes };
    index_write_lock(const std::string & path, wait w);
    ~index_write_lock();
    index_write_lock(const index_write_lock &)             = delete;
    index_write_lock & operator=(const index_write_lock &) = delete;

  private:
    int fd_ = -1;
};

// Whether `temp` is such a file (NAME.tmp.DIGITS) whose writer is gone (none holds its flock: a writer holds it
// for as long as it lives, also where its pid is reused, as a container's pid 1), and if so removes it.
bool remove_if_stale_temp(const std::string & temp);
// The same for every temp file of `path` in its directory (a writer killed mid-write leaves one nothing removes).
// Returns how many were removed.
std::size_t remove_stale_temps(const std::string & path);

// Writes a datastore from already-tokenized documents (atomically: temp file, fsync, rename).
// Used by tests and benchmarks that make synthetic corpora. n_threads is accepted for API stability; the sort is
// single-threaded.
void write_datastore(const std::string & path, std::span<const std::vector<token_id>> documents,
                     const tokenizer_identity & tok, int n_threads = 1);
void write_datastore(const std::string & path, std::span<const std::vector<token_id>> documents,
                     const tokenizer_identity & tok, const index_builder_params & params);

enum class corpus_format {
    text,   // each file is a document (or each blank-line-separated paragraph with split_paragraphs)
    jsonl,  // one JSON record per line (or a .json array of records); `fields` pick the text
    chat,   // ShareGPT (conversations: from/value) or OpenAI (messages: role/content) records, rendered with the
            // model's chat template
};

struct corpus_params {
    corpus_format            format = corpus_format::text;
    std::vector<std::string> fields = {"text"};  // jsonl: dotted paths ("a.b.0") to a string or a list of strings;
                                                  // all strings of a record form one document, joined by "\n"
    std::vector<std::string> include;             // glob patterns ("*.py") on file names in directory walks; empty: all
    bool                     split_paragraphs = false;
};

struct corpus_build_params {
    corpus_params        corpus;
    index_builder_params index;
    int                  n_threads = 1;  // tokenizer threads
};

struct corpus_build_summary {
    datastore_info info;
    std::uint64_t  n_files         = 0;  // inputs read (stdin counts as one)
    std::uint64_t  n_files_skipped = 0;  // binary or invalid UTF-8 text files
    std::uint64_t  n_bytes         = 0;  // input bytes read
    double         t_tokenize_s    = 0;  // wall seconds reading and tokenizing
    double         t_sort_s        = 0;
    double         t_sort_cpu_s    = 0;
    double         t_write_s       = 0;
};

// Reads `inputs` (files; directories walked recursively in name order, filtered by corpus.include; "-" for stdin),
// tokenizes with `tok` on n_threads threads and writes the datastore to `path`. Text files that contain NUL bytes
// or invalid UTF-8 are skipped, each with a warning through on_warning. Throws user_error for a missing input, a
// bad JSON line (naming file and line), or an empty corpus.
corpus_build_summary build_datastore(const std::string & path, const std::vector<std::string> & inputs,
                                     const tokenizer & tok, const corpus_build_params & params,
                                     const std::function<void(const std::string &)> & on_warning = {});

}  // namespace rest
