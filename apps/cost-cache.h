// The verify-cost table is measured once per (model file, backend, threads, batch) and cached on disk, so the
// next start is instant. The cache lives in $RESTCPP_CACHE_DIR (default ~/.cache/rest.cpp)/costs/.
#pragma once

#include "rest/cost-model.h"
#include "rest/llama-model.h"

// Loads the cached table or measures one on slot 0 of ctx (with several slots, on all; they must be idle) and
// caches it. recalibrate: measure even when a table is cached. verbose: print the table, measured or loaded.
rest::cost_table load_or_calibrate_costs(const rest::model & m, rest::target_model & ctx,
                                         const rest::context_params & cp, bool verbose, bool recalibrate = false);
