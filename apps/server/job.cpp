#include "job.h"

#include <iterator>

void text_release::append(text_release && more) {
    text += more.text;
    if (logprobs.empty()) {
        logprobs = std::move(more.logprobs);
    } else {
        logprobs.insert(logprobs.end(), std::make_move_iterator(more.logprobs.begin()),
                        std::make_move_iterator(more.logprobs.end()));
    }
}

void job::publish(text_release released) {
    if (released.empty()) {
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        pending_.append(std::move(released));
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

bool job::wait(std::chrono::milliseconds timeout, text_release & got) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, timeout, [this] { return finished_ || !pending_.empty(); });
    got.append(std::move(pending_));
    pending_ = text_release{};
    return finished_;
}
