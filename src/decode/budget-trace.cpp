#include "budget-trace.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>

namespace rest {

namespace {

// Forwards everything to the policy it wraps; records what the decoder tells it.
class traced_budget final : public budget_policy {
  public:
    traced_budget(std::unique_ptr<budget_policy> inner, std::FILE * out, std::string name) :
        inner_(std::move(inner)), out_(out), name_(std::move(name)) {}
    ~traced_budget() override { std::fclose(out_); }
    traced_budget(const traced_budget &)             = delete;
    traced_budget & operator=(const traced_budget &) = delete;

    bool want_draft(std::size_t n_requests, bool predicted) override { return inner_->want_draft(n_requests, predicted); }
    std::int32_t draft_nodes_hint() const override { return inner_->draft_nodes_hint(); }
    std::int32_t tree_draft_nodes() const override { return inner_->tree_draft_nodes(); }
    float        chain_score_min() const override { return inner_->chain_score_min(); }
    void choose(std::span<const budget_query> queries, std::span<std::int32_t> n_out) override {
        inner_->choose(queries, n_out);
    }
    std::int32_t choose_equal(std::span<const budget_query> queries) override { return inner_->choose_equal(queries); }
    void observe_other_pass() override {
        std::fprintf(out_, "%s\tother\n", name_.c_str());
        inner_->observe_other_pass();
    }
    void observe_warm_up(std::int32_t max_rows) override {
        std::fprintf(out_, "%s\twarm-up\t%d\n", name_.c_str(), (int) max_rows);
        inner_->observe_warm_up(max_rows);
    }
    void observe_request(bool predicted) override { inner_->observe_request(predicted); }
    std::int32_t threads_for(std::int32_t n_rows, std::size_t n_requests) const override {
        return inner_->threads_for(n_rows, n_requests);
    }
    void observe_acceptance(const draft_tree & tree, std::int32_t n_verified, std::span<const std::int32_t> path) override {
        inner_->observe_acceptance(tree, n_verified, path);
    }
    void observe_step(const step_report & r) override {
        std::fprintf(out_, "%s\t%lld\t%d\t%zu\t%zu\t%d\t%d\t%d\t%.1f\t%.1f\t%lld\t%d\t%d\n", name_.c_str(),
                     (long long) ++steps_, (int) r.n_rows, r.n_requests, r.n_equal, (int) r.n_seqs, (int) r.n_threads,
                     (int) r.n_past, r.t_pass_us, r.t_draft_us, (long long) r.n_tokens, r.drafted ? 1 : 0,
                     r.predicted ? 1 : 0);
        inner_->observe_step(r);
    }
    budget_state export_state() const override { return inner_->export_state(); }

  private:
    std::unique_ptr<budget_policy> inner_;
    std::FILE *                    out_;
    std::string                    name_;
    std::int64_t                   steps_ = 0;
};

}  // namespace

std::unique_ptr<budget_policy> traced_if_asked(std::unique_ptr<budget_policy> inner, const std::string & name) {
    const char * path = std::getenv("REST_BUDGET_TRACE");
    if (path == nullptr || *path == '\0') return inner;
    std::FILE * out = std::fopen(path, "a");
    if (out == nullptr) {
        std::fprintf(stderr, "rest: warning: REST_BUDGET_TRACE=%s cannot be opened for appending; no budget trace\n", path);
        return inner;
    }
    // Whole lines, each one write() to a file opened for appending: the policies of a bench (or a server's) write
    // to one file at once, and fully buffered streams interleaved their 4 KB blocks mid-line.
    std::setvbuf(out, nullptr, _IOLBF, 1024);
    // Named by process and instance: a bench's policies, and every process of a run, can share one file.
    static std::atomic<int> instances{0};
    return std::make_unique<traced_budget>(std::move(inner), out,
                                           name + "#" + std::to_string(::getpid()) + "." + std::to_string(++instances));
}

}  // namespace rest
