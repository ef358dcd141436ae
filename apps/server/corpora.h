// Named corpora: what a request may draft from. The --index files are read-only corpora named by their file stem;
// POST /v1/corpora creates or grows writable ones, each persisted as DIR/NAME.idx (rest index append's format), so
// generated text never evicts them and a restart reloads them. A request picks corpora by name (default: all).
#pragma once

#include "rest/datastore.h"
#include "rest/tokenizer.h"
#include "rest/types.h"

#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

struct corpus_info {
    std::string   name;
    std::uint64_t n_documents = 0;
    std::uint64_t n_tokens    = 0;
    bool          read_only   = false;  // an --index file
};

// A request error (a bad name, an unknown or read-only corpus): the route answers 400 or 404 with its message.
struct corpus_error : std::runtime_error {
    int status;
    corpus_error(int s, const std::string & what) : std::runtime_error(what), status(s) {}
};

class corpus_set {
  public:
    // Opens the --index files and every DIR/*.idx (DIR is created if missing; "" : no writable corpora). Throws
    // user_error for a bad file or two corpora of one name.
    corpus_set(const std::vector<std::string> & index_paths, const std::string & dir, const rest::tokenizer & tok);

    // The datastore of these corpora (empty: all), or nullptr when there is none. Names that no longer exist are
    // skipped (a corpus deleted after the request was accepted). The result stays valid while held.
    std::shared_ptr<const rest::datastore> select(const std::vector<std::string> & names) const;
    // corpus_error(400) for a name that does not exist.
    void check(const std::vector<std::string> & names) const;

    // Creates the corpus or appends the documents to it (atomically on disk), then serves the new file.
    corpus_info add(const std::string & name, const std::vector<std::vector<rest::token_id>> & documents);
    // Removes a writable corpus and its file. corpus_error 404 unknown, 400 read-only.
    void remove(const std::string & name);
    std::vector<corpus_info> list() const;
    // The --index files as one datastore (nullptr without any): fixed for the server's lifetime.
    const rest::datastore * indexes() const { return indexes_.get(); }
    bool writable() const { return !dir_.empty(); }

  private:
    struct entry {
        std::shared_ptr<const rest::datastore> ds;
        std::string                            path;
        bool                                   read_only = false;
    };
    void        rebuild_all();  // under mutex_
    std::string path_of(const std::string & name) const;

    const rest::tokenizer &                tok_;
    std::string                            dir_;
    mutable std::mutex                     mutex_;      // entries_, all_
    std::mutex                             write_mutex_;  // one add or remove at a time (builds run outside mutex_)
    std::map<std::string, entry>           entries_;
    std::shared_ptr<const rest::datastore> all_;
    std::shared_ptr<const rest::datastore> indexes_;
};
