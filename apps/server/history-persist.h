// The online store's file (`rest serve --history-file`): one process at a time, loaded at start even when damaged,
// snapshotted periodically so a crash loses at most one interval.
//
// Lock: an flock on the sidecar PATH.lock, held for this object's life. The kernel drops it when the process dies
// (kill -9 included), so no stale lock survives a crash; the sidecar itself stays on disk (deleting it would let
// two processes lock two different inodes of the same name).
//
// Saves: history_store::save writes a temp file, fsyncs and renames, so the file is always one whole snapshot. They
// run on this object's own thread, never the engine's, and are skipped while the store's snapshot version has not
// moved since the last save.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace rest {
class history_store;
}

class history_persist {
  public:
    // Takes the lock. Throws rest::user_error, naming the file, when another process holds it or it cannot be made.
    explicit history_persist(std::string path, double save_interval_s);
    ~history_persist();  // stops the saver thread without a last save (see stop_and_save)
    history_persist(const history_persist &) = delete;
    history_persist & operator=(const history_persist &) = delete;

    // Loads the file into store when it exists. A file that does not load (truncated, garbled, another tokenizer's)
    // is renamed to PATH.corrupt-<unix time>, never deleted, and store stays empty; one warning line on stderr.
    // Throws rest::user_error when the bad file cannot be moved aside (a later save would overwrite it).
    // store must outlive this object.
    void load(rest::history_store & store);

    // Saves every save_interval_s seconds on a thread of its own (nothing when the interval is 0). After load().
    void start();

    // Stops the saver thread and saves once more if the store changed (returns whether it saved). Throws
    // rest::user_error on an I/O error.
    bool stop_and_save();

    const std::string & path() const { return path_; }

  private:
    void run_saver();
    bool save_if_changed();  // false when the store had not changed; throws on I/O errors

    std::string           path_;
    double                save_interval_s_;
    int                   lock_fd_ = -1;
    rest::history_store * store_   = nullptr;

    std::mutex              save_mutex_;           // one save at a time: every save uses the same temp file name
    std::uint64_t           saved_version_ = 0;    // the store's snapshot version at the last save or load
    std::mutex              stop_mutex_;
    std::condition_variable stop_cv_;
    bool                    stop_ = false;
    std::thread             saver_;
};
