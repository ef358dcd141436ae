#include "corpora.h"

#include "rest/index-builder.h"
#include "rest/llama-model.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace {

constexpr const char * k_name_rule = "a corpus name is 1-64 letters, digits, '_', '-' or '.', not starting with '.'";

bool valid_name(const std::string & n) {
    if (n.empty() || n.size() > 64 || n[0] == '.') return false;
    for (char c : n) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '-' || c == '.';
        if (!ok) return false;
    }
    return true;
}

// A name as sent, for an error message: bytes outside printable ASCII as \xNN (a NUL ended the message there).
std::string printable(const std::string & n) {
    std::string out;
    for (unsigned char c : n.substr(0, 200)) {
        if (c >= 0x20 && c < 0x7f) {
            out += (char) c;
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        }
    }
    return out;
}

// A corpus file's temporary copy (NAME.idx.tmp.PID, see datastore_temp_path()) left by a server killed while it
// wrote one: nothing will rename or remove it (remove_if_stale_temp() tells a dead writer's from a live one's).
void remove_dead_writers_temp(const fs::path & p) {
    // Only a corpus file's temp (NAME.idx.tmp.DIGITS, which remove_if_stale_temp() checks the tail of): a corpus
    // may be named "x.idx.tmp.1", and its file, "x.idx.tmp.1.idx", is no temp.
    const std::string name = p.filename().string();
    if (name.rfind(".idx.tmp.") == std::string::npos) return;
    if (rest::remove_if_stale_temp(p.string())) {
        std::fprintf(stderr, "rest serve: removed %s, left by a server that stopped mid-write\n", p.c_str());
    }
}

}  // namespace

corpus_set::corpus_set(const std::vector<std::string> & index_paths, const std::string & dir,
                       const rest::tokenizer & tok) :
    tok_(tok), dir_(dir) {
    const auto add_file = [&](const std::string & path, bool read_only) {
        const std::string name = fs::path(path).stem().string();
        if (entries_.count(name)) {
            throw rest::user_error("two corpora are named '" + name + "' ('" + entries_[name].path + "' and '" + path +
                                   "'): rename one file");
        }
        entries_[name] = {rest::datastore::open(path, tok.fingerprint(), tok.description()), path, read_only};
    };
    std::vector<std::shared_ptr<const rest::datastore>> indexes;
    for (const auto & p : index_paths) {
        add_file(p, true);
        indexes.push_back(entries_[fs::path(p).stem().string()].ds);
    }
    indexes_ = rest::datastore::combine(std::move(indexes), index_paths);
    if (!dir_.empty()) {
        std::error_code ec;
        fs::create_directories(dir_, ec);
        if (ec || !fs::is_directory(dir_)) {
            throw rest::user_error("--corpus-dir '" + dir_ + "' is not a directory we can create or use");
        }
        std::vector<std::string> files;
        for (const auto & e : fs::directory_iterator(dir_)) {
            if (e.path().extension() == ".idx" && e.is_regular_file()) files.push_back(e.path().string());
            remove_dead_writers_temp(e.path());
        }
        std::sort(files.begin(), files.end());
        for (const auto & f : files) {
            // A file copied in under a name POST would refuse (".hidden", "a b") is left unserved too, so that
            // every corpus the server names can be made, used and deleted alike.
            if (!valid_name(fs::path(f).stem().string())) {
                std::fprintf(stderr, "rest serve: warning: corpus file '%s' not served: %s\n", f.c_str(), k_name_rule);
                continue;
            }
            // One damaged file kept every other corpus (and the server) down. It is left as it is, unserved: a POST
            // to its name fails on it (500) rather than replacing it, and DELETE does not know it.
            try {
                add_file(f, false);
            } catch (const rest::user_error & e) {
                std::fprintf(stderr, "rest serve: warning: corpus file '%s' not served: %s\n", f.c_str(), e.what());
            }
        }
    }
    rebuild_all();
}

void corpus_set::rebuild_all() {
    std::vector<std::shared_ptr<const rest::datastore>> parts;
    std::vector<std::string>                            names;
    for (const auto & [name, e] : entries_) {
        parts.push_back(e.ds);
        names.push_back(name);
    }
    all_ = rest::datastore::combine(std::move(parts), names);
}

std::string corpus_set::path_of(const std::string & name) const {
    return (fs::path(dir_) / (name + ".idx")).string();
}

void corpus_set::check(const std::vector<std::string> & names) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto & n : names) {
        if (!entries_.count(n)) {
            throw corpus_error(400, "unknown corpus '" + printable(n) + "' (GET /v1/corpora lists them)");
        }
    }
}

std::shared_ptr<const rest::datastore> corpus_set::select(const std::vector<std::string> & names) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (names.empty()) return all_;
    std::vector<std::shared_ptr<const rest::datastore>> parts;
    std::vector<std::string>                            picked;
    for (const auto & [name, e] : entries_) {  // map order, whatever order the request gave
        if (std::find(names.begin(), names.end(), name) == names.end()) continue;
        parts.push_back(e.ds);
        picked.push_back(name);
    }
    return rest::datastore::combine(std::move(parts), picked);
}

corpus_info corpus_set::add(const std::string & name, const std::vector<std::vector<rest::token_id>> & documents) {
    if (dir_.empty()) throw corpus_error(400, "this server keeps no corpora: start it with --corpus-dir");
    if (!valid_name(name)) {
        throw corpus_error(400, k_name_rule);
    }
    std::lock_guard<std::mutex> writing(write_mutex_);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto                  it = entries_.find(name);
        if (it != entries_.end() && it->second.read_only) {
            throw corpus_error(400, "corpus '" + name + "' is an --index file: it cannot be changed here");
        }
    }
    // Merging the small trailing shards as it appends: a corpus grown one document per request kept one shard per
    // request (300 requests: 300 shards, 669 bytes a token, and every lookup searched each).
    const std::string path = path_of(name);
    std::shared_ptr<const rest::datastore> ds;
    {
        // Under the file's writers' lock, servers sharing --corpus-dir (replicas) append in turn, each onto the
        // file as the other left it: two appends at once lost documents both had acknowledged.
        const rest::index_write_lock locked(path, rest::index_write_lock::wait::yes);
        rest::append_merging(path, documents, rest::identity_of(tok_));
        ds = rest::datastore::open(path, tok_.fingerprint(), tok_.description());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[name] = {ds, path, false};
    rebuild_all();
    return {name, ds->info().n_documents, ds->info().n_tokens, false};
}

void corpus_set::remove(const std::string & name) {
    std::lock_guard<std::mutex> writing(write_mutex_);  // entries_ changes only under it: the lookup below holds
    std::string                 path;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto                  it = entries_.find(name);
        if (it == entries_.end()) throw corpus_error(404, "no corpus named '" + printable(name) + "'");
        if (it->second.read_only) {
            throw corpus_error(400, "corpus '" + name + "' is an --index file: it cannot be deleted here");
        }
        path = it->second.path;
    }
    // The file's lock (which servers sharing --corpus-dir and `rest index append` take too) is waited for without
    // mutex_, which the slots' drafting takes every step.
    try {
        const rest::index_write_lock locked(path, rest::index_write_lock::wait::yes);
        std::error_code       ec;
        fs::remove(path, ec);
        if (ec) throw corpus_error(500, "cannot delete '" + path + "': " + ec.message());
    } catch (const rest::user_error & e) {
        throw corpus_error(500, e.what());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(name);  // requests drafting from it keep their snapshot until they end
    rebuild_all();
}

std::vector<corpus_info> corpus_set::list() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<corpus_info>    out;
    for (const auto & [name, e] : entries_) {
        out.push_back({name, e.ds->info().n_documents, e.ds->info().n_tokens, e.read_only});
    }
    return out;
}
