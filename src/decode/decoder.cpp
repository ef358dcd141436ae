#include "rest/decoder.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <chrono>
#include <cstdint>

namespace rest {

namespace {

// Most generated tokens a drafter allocates for at a request's start (its tables grow past it as they must): an
// unbounded request on a long context would otherwise take tens of MB it may never use.
constexpr std::size_t k_reserve_max = 4096;

double now_us() {
    using clock = std::chrono::steady_clock;
    return std::chrono::duration<double, std::micro>(clock::now().time_since_epoch()).count();
}

void bump(std::vector<std::int64_t> & hist, size_t k) {
    if (hist.size() <= k) {
        hist.resize(k + 1, 0);
    }
    ++hist[k];
}

// The child of `node` (-1: root) drafted with token t among the first n nodes, or -1.
std::int32_t find_child(const draft_tree & tree, std::int32_t node, token_id t) {
    for (size_t i = 0; i < tree.size(); ++i) {
        if (tree.parents[i] == node && tree.tokens[i] == t) {
            return (std::int32_t) i;
        }
    }
    return -1;
}

// Adds the verified nodes [0, n_real) of tree that came from the prediction to its accepted / rejected counts.
void count_prediction(generation_stats & st, const draft_tree & tree, std::int32_t n_real, std::span<const std::int32_t> path) {
    const auto from_prediction = [&](std::int32_t i) { return (tree.sources[(size_t) i] & (std::uint8_t) draft_source::prediction) != 0; };
    std::int64_t verified = 0, accepted = 0;
    for (std::int32_t i = 0; i < n_real; ++i) verified += from_prediction(i);
    for (const std::int32_t v : path) accepted += v < n_real && from_prediction(v);
    st.n_prediction_accepted += accepted;
    st.n_prediction_rejected += verified - accepted;
}

}  // namespace

const char * stop_reason_name(stop_reason r) {
    switch (r) {
        case stop_reason::none:      return "none";
        case stop_reason::length:    return "length";
        case stop_reason::eog:       return "eog";
        case stop_reason::context:   return "context";
        case stop_reason::stop:      return "stop";
        case stop_reason::cancelled: return "cancelled";
    }
    return "?";
}

void generation_stats::add(const generation_stats & o) {
    n_prompt += o.n_prompt;
    n_cached += o.n_cached;
    n_tokens += o.n_tokens;
    n_forward += o.n_forward;
    n_steps += o.n_steps;
    n_drafted += o.n_drafted;
    n_accepted += o.n_accepted;
    n_prediction_accepted += o.n_prediction_accepted;
    n_prediction_rejected += o.n_prediction_rejected;
    n_recomputed += o.n_recomputed;
    for (size_t k = 0; k < o.accept_hist.size(); ++k) {
        if (accept_hist.size() <= k) accept_hist.resize(k + 1, 0);
        accept_hist[k] += o.accept_hist[k];
    }
    for (size_t k = 0; k < o.budget_hist.size(); ++k) {
        if (budget_hist.size() <= k) budget_hist.resize(k + 1, 0);
        budget_hist[k] += o.budget_hist[k];
    }
    t_prefill_us += o.t_prefill_us;
    t_draft_us += o.t_draft_us;
    t_verify_us += o.t_verify_us;
    t_sample_us += o.t_sample_us;
    t_total_us += o.t_total_us;
}

decoder::decoder(target_model & model, budget_policy * policy) : model_(model), policy_(policy) {}

void check_prediction_size(std::size_t n_tokens, std::int32_t n_ctx_slot) {
    if ((std::int64_t) n_tokens > (std::int64_t) n_ctx_slot) {
        throw user_error("the prediction has " + std::to_string(n_tokens) + " tokens, but the context holds " +
                         std::to_string(n_ctx_slot) + " per slot");
    }
}

void decoder::start(request & r, std::span<const token_id> prompt) {
    begin(r, prompt, 0);
    prefill(r, INT32_MAX);
}

std::int32_t decoder::begin(request & r, std::span<const token_id> prompt, std::int32_t n_cached) {
    if (prompt.empty()) {
        throw user_error("the prompt is empty (no tokens)");
    }
    check_prediction_size(r.prediction.size(), model_.n_ctx_slot());
    if (!r.sampler) {
        throw std::invalid_argument("decoder::begin: request has no sampler");
    }
    if ((std::int32_t) prompt.size() >= model_.n_ctx_slot()) {
        throw user_error("the prompt has " + std::to_string(prompt.size()) + " tokens, but the context holds " +
                         std::to_string(model_.n_ctx_slot()) + " per slot");
    }
    r.t_begin_us = now_us();
    r.output.clear();
    r.logprobs.clear();
    r.stopped = stop_reason::none;
    r.stats   = generation_stats{};
    // The root (the prompt's last token) is never in memory before the first step.
    const std::int32_t kept = model_.keep_prefix(r.slot, std::clamp(n_cached, 0, (std::int32_t) prompt.size() - 1));
    r.to_prefill.assign(prompt.begin() + kept, prompt.end() - 1);
    r.n_prefilled    = 0;
    r.stats.n_prompt = (std::int64_t) prompt.size();
    r.stats.n_cached = kept;
    r.root           = prompt.back();
    // The prompt enters the sampler's penalty window as llama.cpp's server and CLI feed it: penalties cover it too.
    for (const token_id t : prompt) r.sampler->accept(t);
    if (r.draft) {
        // The request's whole context at most, and not a long context's worth for an unbounded request; first, so
        // that the prompt is indexed into tables of their final size.
        const std::size_t room = (std::size_t) std::max(0, model_.n_ctx_slot() - (std::int32_t) prompt.size());
        const std::size_t more = r.params.n_predict >= 0 ? (std::size_t) r.params.n_predict : room;
        r.draft->reserve(prompt.size() + std::min({more, room, k_reserve_max}));
        r.draft->reset(prompt);
        r.draft->set_prediction(r.prediction);
    }
    if (policy_) {
        policy_->observe_request(r.draft && r.draft->has_prediction());
    }
    if (r.params.n_predict == 0) {
        r.stopped = stop_reason::length;
    }
    prefilled(r, 0);  // (a prompt that was all cached is ready now)
    return kept;
}

namespace {

// The next (at most) n tokens of r's prompt still to be processed.
std::span<const token_id> next_prompt_chunk(const request & r, std::int32_t n) {
    return std::span<const token_id>(r.to_prefill)
        .subspan(r.n_prefilled)
        .first(std::min<std::size_t>((std::size_t) std::max(n, 0), r.n_prompt_left()));
}

}  // namespace

void decoder::prefill(request & r, std::int32_t n) {
    if (!r.prefilling()) return;
    const std::int64_t f0 = model_.n_forward();
    model_.prefill(r.slot, next_prompt_chunk(r, n));
    prefilled(r, model_.n_forward() - f0);
}

void decoder::prefilled(request & r, std::int64_t n_forward) {
    r.stats.n_forward += n_forward;
    r.n_prefilled = (std::size_t) (model_.n_past(r.slot) - r.stats.n_cached);
    if (n_forward > 0 && policy_) {
        policy_->observe_other_pass();  // the next step follows another batch shape
    }
    if (!r.prefilling() && r.t_begin_us > 0) {
        // From begin() to a ready request: the time to its first step, chunks shared with other steps included.
        const double dt = now_us() - r.t_begin_us;
        r.stats.t_prefill_us += dt;
        r.stats.t_total_us += dt;
        r.t_begin_us = 0;
        r.to_prefill.clear();
        r.to_prefill.shrink_to_fit();
        r.n_prefilled = 0;
    }
}

bool decoder::emit(request & r, token_id t) {
    r.output.push_back(t);
    ++r.stats.n_tokens;
    if (r.on_token && !r.on_token(t)) {
        r.stopped = stop_reason::stop;
    } else if (r.params.stop_at_eog && r.is_eog && r.is_eog(t)) {
        r.stopped = stop_reason::eog;
    } else if (r.params.n_predict >= 0 && (std::int64_t) r.output.size() >= r.params.n_predict) {
        r.stopped = stop_reason::length;
    }
    return !r.done();
}

bool decoder::collect_live(std::span<request * const> requests) {
    live_.clear();
    for (request * r : requests) {
        if (r->done() || r->prefilling()) {
            continue;
        }
        // The root needs one free position; without it the context is full.
        if (model_.n_past(r->slot) + 1 > model_.n_ctx_slot()) {
            r->stopped = stop_reason::context;
            continue;
        }
        live_.push_back(r);
    }
    // In slot order: with a KV cache per sequence llama.cpp runs several sequences in one pass only when their ids
    // come in increasing steps of one (its split_equal), so busy slots 0-3 in any other order would take several.
    std::sort(live_.begin(), live_.end(), [](const request * a, const request * b) { return a->slot < b->slot; });
    if (trees_.size() < live_.size()) {
        trees_.resize(live_.size());
    }
    return !live_.empty();
}

namespace {

// Most draft nodes a request may verify: the context room left behind its root, and its own cap.
std::int32_t room_of(const target_model & m, const request & r) { return m.n_ctx_slot() - m.n_past(r.slot) - 1; }
std::int32_t cap_of(const target_model & m, const request & r) { return std::min(r.params.n_draft_max, room_of(m, r)); }

}  // namespace

double decoder::draft_all() {
    // Unless the policy has found that drafts do not pay lately. Drafting sizes its work to what the policy may
    // choose: a tree for the nodes it chose lately (plus room to grow) costs less than one for the whole cap.
    predicted_ = std::any_of(live_.begin(), live_.end(), [](const request * r) { return r->draft && r->draft->has_prediction(); });
    const bool         want  = !policy_ || policy_->want_draft(live_.size(), predicted_);
    const std::int32_t hint  = !policy_ ? INT32_MAX : model_.trees() ? policy_->tree_draft_nodes() : policy_->draft_nodes_hint();
    double             t_draft = 0;
    drafting_                  = false;  // a request drafted this step (not merely: drafting was allowed)
    n_asked_                   = 0;
    const token_id n_vocab = model_.n_vocab();
    for (size_t i = 0; i < live_.size(); ++i) {
        request &    r    = *live_[i];
        draft_tree & tree = trees_[i];
        tree.clear();
        const std::int32_t cap = cap_of(model_, r);
        if (!want || !r.draft || cap <= 0) continue;
        const double       t0    = now_us();
        const std::int32_t nodes = std::min(cap, hint);
        tree = model_.trees() ? r.draft->draft(nodes)
                              : draft_chain(*r.draft, cap, nodes, room_of(model_, r), policy_ ? policy_->chain_score_min() : 0.0f);
        // A token outside the vocabulary (a corrupt datastore) can never be accepted, and llama.cpp would refuse
        // the batch: the tree ends before the first one (parents come first, so what is kept stays a tree).
        const auto bad = std::find_if(tree.tokens.begin(), tree.tokens.end(),
                                      [n_vocab](token_id t) { return t < 0 || t >= n_vocab; });
        tree.truncate((std::size_t) (bad - tree.tokens.begin()));
        const double dt = now_us() - t0;
        r.stats.t_draft_us += dt;
        t_draft += dt;
        drafting_ = true;
        // What the sources were asked for (a chain along a prediction goes on for free: not counted, or the nodes
        // would look cheap and the hint would ask the other sources for more).
        n_asked_ += model_.trees() ? nodes
                                   : std::max<std::int32_t>(1, std::min<std::int32_t>((std::int32_t) tree.size(),
                                                                                      chain_tree_nodes(nodes, room_of(model_, r))));
    }
    return t_draft;
}

void decoder::choose_budget() {
    queries_.resize(live_.size());
    n_keep_.assign(live_.size(), 0);
    for (size_t i = 0; i < live_.size(); ++i) {
        queries_[i].tree   = &trees_[i];
        queries_[i].n_past = model_.n_past(live_[i]->slot);
        // Beyond its tree a request may be padded (the policy's choice), within its cap; never without a drafter.
        queries_[i].n_max  = live_[i]->draft ? cap_of(model_, *live_[i]) : 0;
    }
    // Chains of several requests live in separate sequences, and llama.cpp runs a batch whose sequences hold
    // unequal token counts as several forward passes (one per count): so they all verify k nodes, shorter chains
    // padded in build_batch().
    equal_rows_ = !model_.trees() && live_.size() > 1;
    if (equal_rows_) {
        std::int32_t k = 0;
        if (policy_) {
            k = policy_->choose_equal(queries_);
        } else {
            for (size_t i = 0; i < live_.size(); ++i) k = std::max(k, (std::int32_t) trees_[i].size());
        }
        std::fill(n_keep_.begin(), n_keep_.end(), k);
    } else if (policy_) {
        policy_->choose(queries_, n_keep_);
    } else {
        for (size_t i = 0; i < live_.size(); ++i) n_keep_[i] = (std::int32_t) trees_[i].size();
    }
    // Every request keeps to its share of sequence ids (one per leaf).
    n_real_.assign(live_.size(), 0);
    const std::int32_t leaf_share = std::max(1, model_.n_leaves_max() / (std::int32_t) live_.size());
    for (size_t i = 0; i < live_.size(); ++i) {
        draft_tree & tree = trees_[i];
        std::int32_t n    = std::clamp(n_keep_[i], 0, (std::int32_t) tree.size());
        while (n > 0 && (std::int32_t) tree.n_leaves(n) > leaf_share) {
            --n;
        }
        tree.truncate(n);
        n_real_[i] = n;
        n_keep_[i] = std::max(n, std::min(n_keep_[i], queries_[i].n_max));  // from here: nodes with padding
    }
}

void decoder::build_batch() {
    std::int32_t rows_padded = 0;
    for (size_t i = 0; i < live_.size(); ++i) rows_padded += 1 + n_keep_[i];
    // Padding only while the batch fits one pass (llama.cpp's n_batch); it is what goes first.
    const bool pad = rows_padded <= model_.n_rows_max();
    rows_          = 0;
    plain_rows_    = 0;
    seqs_          = 0;
    batch_.clear();
    for (size_t i = 0; i < live_.size(); ++i) {
        request &    r    = *live_[i];
        draft_tree & tree = trees_[i];
        // Padding up to the policy's choice (the same k for every chain of a batch; a steady shape for one request):
        // any token is safe to verify, it is accepted only if it is what the target emits there. It continues the
        // last node, so it adds no leaf. A request without nodes gets none: its pass stays plain decoding's.
        assert(n_keep_[i] == 0 || r.draft);
        const token_id fill = tree.empty() ? r.root : tree.tokens.back();
        while (pad && (std::int32_t) tree.size() < n_keep_[i]) {
            tree.add(fill, (std::int32_t) tree.size() - 1, 0.0f, 0);
        }
        const std::int32_t pending = model_.n_pending(r.slot);
        plain_rows_ += 1 + pending;
        rows_ += 1 + (std::int32_t) tree.size() + pending;
        seqs_ += std::max<std::int32_t>(1, (std::int32_t) tree.n_leaves(tree.size()));
        tree_request tr;
        tr.slot    = r.slot;
        tr.root    = r.root;
        tr.tokens  = tree.tokens;
        tr.parents = tree.parents;
        tr.depths  = tree.depths;
        batch_.push_back(tr);
    }
}

std::size_t decoder::pass_shape() const {
    // Chains of several requests form one pass only when they are equal and their slots consecutive, which is what
    // the policy priced (n_equal requests); otherwise llama.cpp runs several passes, some of a single row.
    if (!equal_rows_) return 1;
    for (size_t i = 1; i < live_.size(); ++i) {
        if (batch_[i].tokens.size() != batch_[0].tokens.size() || live_[i]->slot != live_[i - 1]->slot + 1) {
            return 0;
        }
    }
    return live_.size();
}

bool decoder::verify() {
    // On the thread count the policy found fastest for the pass. Several passes (n_equal 0) keep the context's
    // threads: some of them are single rows, which must compute exactly as plain decoding does.
    auto threads_for = [&](std::int32_t n_rows) {
        const bool plain = n_rows == plain_rows_;  // no nodes at all: plain decoding's threads
        // A pass that carries prompt rows too is not the shape the policy timed: the context's threads.
        return policy_ && !plain && !mixed_ && pass_shape() > 0 ? policy_->threads_for(n_rows, live_.size()) : 0;
    };
    auto set_threads = [&] {
        const std::int32_t t = threads_for(rows_);
        model_.set_decode_threads(t);
        pass_threads_ = t > 0 ? t : model_.n_threads();
    };
    set_threads();
    if (model_.decode(batch_) == decode_status::ok) return true;
    // The memory cannot hold the trees: plain decoding this step.
    for (size_t i = 0; i < live_.size(); ++i) {
        trees_[i].clear();
        n_real_[i]        = 0;
        batch_[i].tokens  = {};
        batch_[i].parents = {};
        batch_[i].depths  = {};
    }
    rows_ = plain_rows_;
    seqs_ = (std::int32_t) live_.size();
    set_threads();
    if (model_.decode(batch_) == decode_status::ok) return true;
    for (request * r : live_) {
        r->stopped = stop_reason::context;
    }
    return false;
}

std::int64_t decoder::walk() {
    // Sample once per visited node, follow the child drafted with the sampled token.
    std::int64_t n_tokens = 0;
    for (size_t i = 0; i < live_.size(); ++i) {
        request &          r    = *live_[i];
        const draft_tree & tree = trees_[i];
        const double       t0   = now_us();
        path_.clear();
        emitted_.clear();
        std::int32_t node = -1;
        while (true) {
            const auto     logits = model_.logits((std::int32_t) i, node);
            const token_id t      = r.sampler->sample(logits);
            if (r.n_logprobs >= 0) r.logprobs.push_back(logprobs_of(logits, t, r.n_logprobs));
            r.sampler->accept(t);
            emitted_.push_back(t);
            const bool go_on = emit(r, t);
            const std::int32_t child = find_child(tree, node, t);
            if (child < 0) {
                r.root = t;
                break;
            }
            path_.push_back(child);  // t is already in the KV memory as this child
            node = child;
            if (!go_on) {
                break;
            }
        }
        model_.commit((std::int32_t) i, path_);
        r.stats.n_recomputed += model_.n_pending(r.slot);  // decode() consumed the earlier ones
        if (policy_ && !tree.empty()) {
            policy_->observe_acceptance(tree, n_real_[i], path_);  // padding says nothing about drafts
        }
        if (r.draft) {
            r.draft->accept(emitted_);
        }
        n_tokens += (std::int64_t) emitted_.size();
        ++r.stats.n_forward;
        ++r.stats.n_steps;
        r.stats.n_drafted += (std::int64_t) n_real_[i];
        // Padding follows the real nodes of a chain, so the accepted real nodes are a prefix of the path.
        r.stats.n_accepted += std::min<std::int64_t>((std::int64_t) path_.size(), n_real_[i]);
        count_prediction(r.stats, tree, n_real_[i], path_);
        bump(r.stats.accept_hist, path_.size());
        bump(r.stats.budget_hist, tree.size());
        r.stats.t_sample_us += now_us() - t0;
    }
    return n_tokens;
}

void decoder::step(std::span<request * const> requests, request * prompt, std::int32_t n_prompt) {
    const bool live = collect_live(requests);
    mixed_          = false;
    if (prompt && n_prompt > 0 && prompt->prefilling()) {
        if (!live) {
            prefill(*prompt, n_prompt);
            return;
        }
        model_.queue_prefill(prompt->slot, next_prompt_chunk(*prompt, n_prompt));  // consumed by this step's decode()
        mixed_ = true;
    }
    if (!live) {
        return;
    }
    step_live();
    if (mixed_) {
        prefilled(*prompt, 1);
    }
}

void decoder::step_live() {
    const double t_step0 = now_us();
    const double t_draft = draft_all();
    choose_budget();
    build_batch();
    const double t_dec0 = now_us();
    if (!verify()) {
        return;
    }
    const double       t_verify = now_us() - t_dec0;
    const std::size_t  n_equal  = pass_shape();
    std::int64_t       past_sum = 0;
    for (const request * r : live_) past_sum += model_.n_past(r->slot);
    const std::int64_t n_tokens = walk();
    const double       t_end    = now_us();
    if (policy_ && mixed_) {
        // Another request's prompt rows shared the pass: its time prices no shape the policy chooses.
        policy_->observe_other_pass();
    } else if (policy_) {
        step_report rep;
        rep.n_rows     = rows_;
        rep.n_requests = live_.size();
        rep.n_equal    = n_equal;
        rep.n_seqs     = seqs_;
        rep.n_past     = (std::int32_t) (past_sum / (std::int64_t) live_.size());
        // A simulated target says what its pass took (the verify part; the walk is measured).
        rep.t_pass_us  = model_.last_pass_us() >= 0 ? model_.last_pass_us() + (t_end - t_dec0 - t_verify)
                                                    : t_end - t_dec0;
        rep.t_draft_us = t_draft;
        rep.n_tokens   = n_tokens;
        rep.drafted    = drafting_;
        rep.n_asked    = n_asked_;
        rep.predicted  = predicted_;
        rep.n_threads  = pass_threads_;
        rep.n_threads_context = model_.n_threads();
        policy_->observe_step(rep);
    }
    for (request * r : live_) {
        r->stats.t_verify_us += t_verify;
        r->stats.t_total_us += t_end - t_step0;
    }
}

warm_up_result decoder::warm_up(const cost_table & costs, std::int32_t n_draft_max) {
    const warm_up_result w = rest::warm_up(model_, 0, costs, n_draft_max + 1);
    if (policy_ != nullptr) policy_->observe_warm_up(w.rows);
    return w;
}

void decoder::run(request & r, std::span<const token_id> prompt) {
    start(r, prompt);
    request * one[] = {&r};
    while (!r.done()) {
        step(one);
    }
    if (r.draft) {
        r.draft->finish();
    }
}

token_id gap_recording_sampler::sample(std::span<const float> l) {
    // One pass for the argmax (first index of the largest logit, as argmax()) and the runner-up.
    float  a = -INFINITY, b = -INFINITY;
    size_t ia = 0, ib = 0;
    for (size_t i = 0; i < l.size(); ++i) {
        const float v = l[i];
        if (v > b) {
            if (v > a) {
                b  = a;
                ib = ia;
                a  = v;
                ia = i;
            } else {
                b  = v;
                ib = i;
            }
        }
    }
    gaps_.push_back(a - b);
    if (runner_up_) runner_up_->push_back((token_id) ib);
    return (token_id) ia;
}

token_id argmax(std::span<const float> logits) {
    return (token_id) (std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace rest
