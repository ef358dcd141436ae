// The verify-cost table is measured once per (model file, backend, threads, batch, layout) and cached on disk, so
// the next start is instant; what the budget policy learned while running is cached per (those, datastore), so the
// next run starts where the last one ended. The caches live in $RESTCPP_CACHE_DIR (default ~/.cache/rest.cpp), in
// costs/ (a table: one line, "rest-cost 4 ...", then its key; a tree context's measured tree step beside it,
// "rest-tree-step 2 <rows> <leaves> <ratio>", then its key) and budget/ (JSON with named fields and a version).
#pragma once

#include "rest/budget.h"
#include "rest/cost-model.h"
#include "rest/llama-model.h"

#include <memory>
#include <optional>
#include <string>

// A context for speculation and its measured verify cost. layout "tree" or "chain" opens that layout; "auto" opens
// chains, measures them, and keeps trees only where the measured cost is flat: t(flat_rows) at most flat_factor x
// t(1) (a GPU), and then, in the tree context, a whole step of a (flat_rows + 1)-row tree in tree_leaves branches
// (pass and commit, tree_step_ratio()) at most flat_factor x a plain step, since a tree's extra branches pay only
// where rows and branches are nearly free. On an H200 the demo model's rows were flat (t(16) = 1.5 x t(1)) and its
// tree steps were not: 8-node trees ran at 1.04x plain decoding where 8-node chains ran at 2.43x. On a CPU, t(16) is
// 4-8x t(1): there the best path holds most of a tree's value, and the chain layout avoids the tree layout's fixed
// cost per pass (llama.cpp's unified KV pool checks all 256 sequence ids, pairwise, on every llama_decode: +0.04 ms
// on stories260K, 35% of its plain step), and keeps KV cells in position order (bit-exact with plain decoding under
// flash attention).
struct measured_context {
    std::unique_ptr<rest::target_model> ctx;
    rest::cost_table                    costs;
    std::string                         key;  // cost_cache_key()
    bool                                trees = false;
};
measured_context open_measured_context(const rest::model & m, rest::context_params cp, const std::string & layout,
                                       bool verbose, bool recalibrate);
constexpr std::int32_t k_flat_rows   = 16;
constexpr double       k_flat_factor = 2.0;
constexpr std::int32_t k_tree_leaves = 4;

// Loads the cached table or measures one on slot 0 of ctx (with several slots, on all; they must be idle) and
// caches it. recalibrate: measure even when a table is cached. verbose: print the table, measured or loaded.
rest::cost_table load_or_calibrate_costs(const rest::model & m, rest::target_model & ctx,
                                         const rest::context_params & cp, bool verbose, bool recalibrate = false);

// What identifies a cost table: the model file (path, size, mtime), backend, threads, batch, layout, flash
// attention and slots.
std::string cost_cache_key(const rest::model & m, const rest::target_model & ctx, const rest::context_params & cp);

// The learned state cached for (key, the datastores at index_paths, none for none), or nothing: none cached yet, or a file
// that is corrupt, of another version or for another key, which is ignored with a one-line warning.
std::optional<rest::budget_state> load_budget_state(const std::string & key, const std::vector<std::string> & index_paths);
// Writes it (atomically: a temporary file renamed over the old one). Failures are a warning, never an error.
void save_budget_state(const std::string & key, const std::vector<std::string> & index_paths,
                       const rest::budget_state & state);
// The JSON form, for tests: parse returns nothing for anything malformed, and says why in `why`.
std::string                       budget_state_to_json(const rest::budget_state & s, const std::string & key);
std::optional<rest::budget_state> budget_state_from_json(const std::string & text, const std::string & key, std::string & why);
