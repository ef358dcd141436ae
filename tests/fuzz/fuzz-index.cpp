// libFuzzer target (scripts/fuzz-index.sh) and CTest replay (fuzz-replay.cpp) over a datastore file's bytes: open,
// then suffix-array lookups, drafting from it and its verification. Whatever the bytes, the only acceptable outcomes
// are a user_error (a one-line message) or lookups and drafts that complete; a signal or a sanitizer report is a
// finding.
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/types.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

const std::string & scratch_path() {
    static const std::string p = "/tmp/rest-fuzz-index-" + std::to_string(getpid()) + ".idx";
    return p;
}

// A context for the drafter: the input's last bytes read as token ids (so mutations steer it), then the index's own
// first tokens (so lookups hit). Ids may be anything; the datastore must cope.
std::vector<rest::token_id> context_of(const std::uint8_t * data, std::size_t size, const rest::datastore & ds) {
    std::vector<rest::token_id> ctx;
    for (std::size_t i = size >= 16 ? size - 16 : 0; i + 2 <= size; i += 2) {
        std::uint16_t v;
        std::memcpy(&v, data + i, 2);
        ctx.push_back(v);
    }
    for (const rest::index_shard & s : ds.shards()) {
        for (std::uint64_t p = 0; p < 6 && p < s.n_tokens(); ++p) ctx.push_back(s.token_at(p));
        break;
    }
    return ctx;
}

}  // namespace

// Inputs that opened (the replay checks that its valid seeds do, so that lookups and drafting are exercised).
std::size_t rest_fuzz_index_opened = 0;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size) {
    {
        std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char *>(data), (std::streamsize) size);
    }
    std::unique_ptr<rest::datastore> ds;
    try {
        ds = rest::datastore::open(scratch_path());
    } catch (const rest::user_error &) {
        std::remove(scratch_path().c_str());
        return 0;
    }
    std::remove(scratch_path().c_str());  // the mapping keeps the bytes
    ++rest_fuzz_index_opened;
    const std::vector<rest::token_id> ctx = context_of(data, size, *ds);
    for (const rest::index_shard & s : ds->shards()) {
        for (std::size_t n = 1; n <= ctx.size() && n <= 4; ++n) {
            const rest::sa_range r = s.find(std::span<const rest::token_id>(ctx).last(n));
            for (std::uint64_t k = r.lo; k < r.hi && k < r.lo + 4; ++k) (void) s.next_token(k, (std::uint32_t) n);
        }
    }
    // The `rest index query` path: the longest matching suffix and its continuations.
    const rest::datastore_match m = rest::find_longest_suffix(*ds, ctx, 16);
    (void) rest::next_token_counts(*ds, m, 8);
    rest::drafter d(ds.get(), nullptr, rest::drafter_params{});
    d.reset(ctx);
    (void) d.draft(16);
    const rest::token_id next[1] = {ctx.empty() ? 0 : ctx.back()};
    d.accept(next);
    (void) d.draft(32);
    // The bigram tables: a version 1 file's, which a large index gets from a background thread after open, built
    // here (a version 2 file has its own from open, and this does nothing); looked up, and drafted from (a new
    // drafter's first searches of each bigram go through them).
    for (const rest::index_shard & s : ds->shards()) {
        s.build_bigrams({});
        rest::sa_range r;
        for (std::size_t i = 0; i + 1 < ctx.size(); ++i) {
            // Whatever the bytes, a range inside the suffix array (drafting indexes it without further checks).
            if (s.bigram_range(ctx[i], ctx[i + 1], r) && (r.lo > r.hi || r.hi > s.n_suffixes())) __builtin_trap();
        }
    }
    rest::drafter d2(ds.get(), nullptr, rest::drafter_params{});
    d2.reset(ctx);
    (void) d2.draft(16);
    // `rest index verify` (and compact, which verifies first): a user_error naming the bad section, or nothing.
    try {
        ds->verify();
    } catch (const rest::user_error &) {
    }
    return 0;
}
