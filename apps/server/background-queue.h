// One worker thread that runs tasks in submission order, off the engine thread. The engine hands it work that
// must not stall a decoding step: adding a finished output to the online store suffix-sorts it and sometimes
// merges store segments (tens of milliseconds at the store's largest sizes).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

class background_queue {
  public:
    background_queue() : thread_([this] { run(); }) {}
    ~background_queue() { stop(); }
    background_queue(const background_queue &) = delete;
    background_queue & operator=(const background_queue &) = delete;

    void push(std::function<void()> task) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            tasks_.push_back(std::move(task));
        }
        cv_.notify_one();
    }

    // Runs every task already pushed, then joins. Idempotent.
    void stop() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        cv_.notify_one();
        if (thread_.joinable()) {
            thread_.join();
        }
    }

  private:
    void run() {
        std::unique_lock<std::mutex> lock(mutex_);
        while (true) {
            cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
            if (tasks_.empty()) {
                return;  // stop_ and drained
            }
            std::function<void()> task = std::move(tasks_.front());
            tasks_.pop_front();
            lock.unlock();
            try {
                task();
            } catch (...) {
                // A task's failure (e.g. out of memory in the store) must not take the server down.
            }
            lock.lock();
        }
    }

    std::mutex                        mutex_;
    std::condition_variable           cv_;
    std::deque<std::function<void()>> tasks_;
    bool                              stop_ = false;
    std::thread                       thread_;
};
