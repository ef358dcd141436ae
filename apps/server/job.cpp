#include "job.h"

void job::publish(const std::string & text) {
    if (text.empty()) {
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        pending_ += text;
    }
    cv_.notify_all();
}

void job::finish(job_output out) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (finished_) {
            return;
        }
        out_      = std::move(out);
        finished_ = true;
    }
    cv_.notify_all();
}

bool job::wait(std::chrono::milliseconds timeout, std::string & text) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, timeout, [this] { return finished_ || !pending_.empty(); });
    text += pending_;
    pending_.clear();
    return finished_;
}
