#include "history-persist.h"

#include "rest/history-store.h"
#include "rest/types.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace {

// Opens and locks PATH.lock, recording our pid in it for the next process's message. Returns the descriptor.
int lock_sidecar(const std::string & path) {
    const std::string lock_path = path + ".lock";
    // O_CLOEXEC: a child process must not inherit (and so prolong) the lock.
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        throw rest::user_error("online store " + path + ": cannot create its lock file " + lock_path + ": " +
                               std::strerror(errno));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char      pid[32] = {};
        const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
        ::close(fd);
        if (err == EWOULDBLOCK) {
            const std::string who = n > 0 ? "process " + std::string(pid, std::strcspn(pid, "\n")) : "another process";
            throw rest::user_error("online store " + path + " is in use by " + who + " (" + lock_path +
                                   " is locked); give each server its own --history-file");
        }
        throw rest::user_error("online store " + path + ": cannot lock " + lock_path + ": " + std::strerror(err));
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    // A failed write costs only the pid in a later refused start's message; the lock holds either way.
    const bool wrote = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) == (ssize_t) pid.size();
    (void) wrote;
    return fd;
}

// PATH.corrupt-<unix time>, with a counter when that name is taken (two bad starts within one second).
std::string aside_name(const std::string & path) {
    const std::string base = path + ".corrupt-" + std::to_string((long long) std::time(nullptr));
    std::string       name = base;
    for (int i = 1; std::filesystem::exists(name); ++i) {
        name = base + "-" + std::to_string(i);
    }
    return name;
}

}  // namespace

history_persist::history_persist(std::string path, double save_interval_s) :
    path_(std::move(path)),
    save_interval_s_(save_interval_s) {
    if (save_interval_s_ < 0) {
        throw rest::user_error("--history-save-interval must be at least 0, got " + std::to_string(save_interval_s_));
    }
    lock_fd_ = lock_sidecar(path_);
}

history_persist::~history_persist() {
    {
        std::lock_guard<std::mutex> lock(stop_mutex_);
        stop_ = true;
    }
    stop_cv_.notify_all();
    if (saver_.joinable()) {
        saver_.join();
    }
    ::close(lock_fd_);  // releases the flock
}

void history_persist::load(rest::history_store & store) {
    store_ = &store;
    if (std::filesystem::exists(path_)) {
        try {
            store.load(path_);
        } catch (const rest::user_error & e) {
            // Starting empty beats refusing to serve, but the file may be all a user has: keep it, renamed, so
            // the next save cannot replace it.
            const std::string aside = aside_name(path_);
            std::error_code   ec;
            std::filesystem::rename(path_, aside, ec);
            if (ec) {
                throw rest::user_error(std::string(e.what()) + "; cannot move it aside to " + aside + ": " +
                                       ec.message());
            }
            store.clear();
            std::fprintf(stderr, "rest serve: warning: %s; kept it as %s, starting with an empty online store\n",
                         e.what(), aside.c_str());
        }
    }
    std::lock_guard<std::mutex> lock(save_mutex_);
    saved_version_ = store.snapshot()->version;  // what is on disk (or nothing worth writing)
}

void history_persist::start() {
    if (store_ != nullptr && save_interval_s_ > 0 && !saver_.joinable()) {
        saver_ = std::thread([this] { run_saver(); });
    }
}

void history_persist::run_saver() {
    const auto interval = std::chrono::duration<double>(save_interval_s_);
    std::unique_lock<std::mutex> lock(stop_mutex_);
    while (!stop_cv_.wait_for(lock, interval, [this] { return stop_; })) {
        lock.unlock();
        try {
            save_if_changed();
        } catch (const std::exception & e) {
            // A full disk must not take the server down; the next interval tries again.
            std::fprintf(stderr, "rest serve: warning: periodic save failed: %s\n", e.what());
        }
        lock.lock();
    }
}

bool history_persist::save_if_changed() {
    std::lock_guard<std::mutex> lock(save_mutex_);
    // Read before saving: an addition racing with the save leaves the version ahead, so the next interval saves
    // again rather than missing it.
    const std::uint64_t version = store_->snapshot()->version;
    if (version == saved_version_) {
        return false;
    }
    store_->save(path_);
    saved_version_ = version;
    return true;
}

bool history_persist::stop_and_save() {
    {
        std::lock_guard<std::mutex> lock(stop_mutex_);
        stop_ = true;
    }
    stop_cv_.notify_all();
    if (saver_.joinable()) {
        saver_.join();
    }
    return store_ != nullptr && save_if_changed();
}
