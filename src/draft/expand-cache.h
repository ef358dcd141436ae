// A small per-drafter cache of expand_sa results for matches with many occurrences.
//
// Why: a selection under a short, frequent match (hundreds to millions of occurrences) reads scan_max continuations
// at random places of the index, and those matches recur within a request ("\n\n", ") {"...). It still pays with
// sampled selections: on the stdlib index with all sources a step's mean was 4.97-5.20 us with it against 5.28-5.44
// without (2026-12-03). A suffix array never changes (and the history snapshot is fixed for a request), so a match's
// ranges identify its candidate tree exactly; a result computed for n nodes also answers any smaller n by
// truncation, since the selection order is a total order and the sample does not depend on n.
#pragma once

#include "tree-expand.h"

#include <cstdint>
#include <span>
#include <vector>

namespace rest {

class expand_cache {
  public:
    explicit expand_cache(std::size_t capacity = 4096) : capacity_(capacity) {}

    // The cached tree for these roots, truncated to n_top, or nullptr. Valid until the next put().
    const cand_tree * find(std::span<const sa_root> roots, std::uint32_t depth0, int n_top) {
        for (entry & e : entries_) {
            if (e.depth0 != depth0 || e.ranges.size() != roots.size() || e.n_top < n_top) {
                continue;
            }
            bool same = true;
            for (std::size_t i = 0; i < roots.size() && same; ++i) {
                same = e.ranges[i] == roots[i].range;
            }
            if (!same) {
                continue;
            }
            e.used = ++clock_;
            view_  = e.tree;
            if (view_.nodes.size() > static_cast<std::size_t>(std::max(n_top, 0))) {
                view_.nodes.resize(static_cast<std::size_t>(std::max(n_top, 0)));
            }
            view_.n_probes = 0;
            return &view_;
        }
        return nullptr;
    }

    void put(std::span<const sa_root> roots, std::uint32_t depth0, int n_top, const cand_tree & tree) {
        entry * slot = nullptr;
        if (entries_.size() < capacity_) {
            slot = &entries_.emplace_back();
        } else {
            slot = &entries_[0];
            for (entry & e : entries_) {
                if (e.used < slot->used) {
                    slot = &e;
                }
            }
        }
        slot->depth0 = depth0;
        slot->n_top  = n_top;
        slot->ranges.clear();
        for (const sa_root & r : roots) {
            slot->ranges.push_back(r.range);
        }
        slot->tree = tree;
        slot->used = ++clock_;
    }

    void clear() { entries_.clear(); }

  private:
    struct entry {
        std::uint32_t         depth0 = 0;
        int                   n_top  = 0;
        std::vector<sa_range> ranges;
        cand_tree             tree;
        std::uint64_t         used = 0;
    };

    std::size_t        capacity_;
    std::vector<entry> entries_;
    std::uint64_t      clock_ = 0;
    cand_tree          view_;
};

}  // namespace rest
