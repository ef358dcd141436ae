// An index whose framing is valid (header and shard table pass their checksums) but whose data sections hold
// garbage never crashes the engine: each section in turn (text, suffix array, first-token table, the bigram table's
// runs, the suffix samples) is overwritten with random bytes, all-ones, all-zeros or in-range but wrong values; opening the file then
// either fails with one line naming the section, or generation drafts from it and still emits plain decoding's
// tokens (verification turns bad drafts into rejected ones). Random text values reach past the vocabulary, which the
// decoder must drop.
#include "decode/online-budget.h"
#include "index/index-format.h"
#include "rest/datastore.h"
#include "rest/drafter.h"
#include "rest/index-builder.h"
#include "rest/llama-model.h"
#include "strict-compare.h"
#include "test-util.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

using namespace rest;
namespace fmt = rest::index_format;

namespace {

std::vector<char> read_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string & path, const std::vector<char> & bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), (std::streamsize) bytes.size());
}

enum class section { text, sa, buckets, bigrams, samples };
// sparse: one entry in five replaced by a random value (mostly intact text whose drafts carry ids past the vocabulary)
enum class garbage { random, ones, zeros, in_range, sparse };

// Overwrites one data section of every shard; the header and the shard table (and their checksums) stay valid.
void corrupt(std::vector<char> & f, section which, garbage how, std::uint64_t seed) {
    fmt::file_header hd;
    std::memcpy(&hd, f.data(), sizeof hd);
    std::mt19937_64 rng(seed);
    for (std::uint32_t i = 0; i < hd.n_shards; ++i) {
        fmt::shard_entry e;
        std::memcpy(&e, f.data() + hd.table_offset + i * sizeof e, sizeof e);
        const std::uint64_t n_buckets = fmt::n_buckets_for(hd.n_vocab);
        if (which == section::bigrams) {
            EXPECT_GT(e.n_bigrams, 0u) << "shard " << i << " has no bigram table to corrupt";
        }
        if (which == section::samples) {
            EXPECT_GT(e.n_samples, 0u) << "shard " << i << " has no sample table to corrupt";
        }
        const bool          tokens = which == section::text || which == section::samples;
        const std::uint64_t off = which == section::text      ? e.text_offset
                                  : which == section::sa      ? e.sa_offset
                                  : which == section::buckets ? e.bucket_offset
                                  : which == section::samples ? e.sample_offset
                                                              : e.bigram_offset + n_buckets * 4;
        const std::uint64_t width = tokens ? hd.token_width : 4;
        const std::uint64_t n     = which == section::text      ? e.n_text
                                    : which == section::sa      ? e.n_sa
                                    : which == section::buckets ? n_buckets
                                    : which == section::samples ? e.n_samples * fmt::k_sample_tokens
                                  // the runs' keys and first ranks: open checks the run offsets before them
                                  // (as the first-token table), a lookup bounds what these give
                                                                : 2 * e.n_bigrams;
        // In range: what each entry could hold in a valid file (a token id, a text position, a rank, a run's
        // offset, key or first rank).
        const std::uint64_t range = tokens ? (std::uint64_t) hd.n_vocab : which == section::sa ? e.n_text : e.n_sa + 1;
        for (std::uint64_t k = 0; k < n; ++k) {
            if (how == garbage::sparse && rng() % 5 != 0) continue;
            std::uint64_t v = how == garbage::random || how == garbage::sparse ? rng()
                              : how == garbage::ones                           ? ~0ull
                              : how == garbage::zeros                          ? 0
                                                                               : rng() % range;
            std::memcpy(f.data() + off + k * width, &v, width);
        }
    }
}

TEST(index_garbage, every_data_section_gives_an_error_or_plain_output) {
    fixture_params fp;
    fp.seed = 13;
    const auto m = rest_test::load_model(rest_test::fixture_model(fp));
    context_params cp;
    cp.n_ctx     = 256;
    cp.n_threads = 1;
    cp.trees     = false;
    auto ctx = m->new_context(cp);
    std::mt19937_64 rng(8);
    std::vector<std::vector<token_id>> prompts, docs;
    std::vector<rest_test::greedy_run> plains;
    for (int i = 0; i < 4; ++i) {
        std::vector<token_id> pr(4);
        for (auto & t : pr) t = std::uniform_int_distribution<int>(100, m->info().n_vocab - 1)(rng);
        plains.push_back(rest_test::generate_greedy(*m, *ctx, pr, 48, nullptr, 0, nullptr));
        std::vector<token_id> doc = pr;
        doc.insert(doc.end(), plains.back().tokens.begin(), plains.back().tokens.end());
        docs.push_back(doc);
        prompts.push_back(pr);
    }
    const std::string good = rest_test::tmp_dir() + "/garbage-good.idx", bad = rest_test::tmp_dir() + "/garbage-bad.idx";
    // Each document 300 times, so that searches run over ranges long enough to go by the suffix samples.
    std::vector<std::vector<token_id>> copies;
    for (int k = 0; k < 300; ++k) copies.insert(copies.end(), docs.begin(), docs.end());
    write_datastore(good, copies, identity_of(m->vocab()));
    const std::vector<char> bytes = read_file(good);
    int          n_errors = 0, n_generated = 0;
    std::int64_t n_drafted_total = 0;
    for (const section which : {section::text, section::sa, section::buckets, section::bigrams, section::samples}) {
        for (const garbage how : {garbage::random, garbage::ones, garbage::zeros, garbage::in_range, garbage::sparse}) {
            const std::string what = "section " + std::to_string((int) which) + ", garbage " + std::to_string((int) how);
            std::vector<char> f = bytes;
            corrupt(f, which, how, 17 + 4 * (int) which + (int) how);
            write_file(bad, f);
            std::unique_ptr<datastore> ds;
            try {
                ds = datastore::open(bad, m->vocab().fingerprint());
            } catch (const user_error & e) {
                const std::string msg = e.what();
                EXPECT_EQ(msg.find('\n'), std::string::npos) << what << ": " << msg;
                EXPECT_NE(msg.find("table"), std::string::npos) << what << ": the error names the section: " << msg;
                ++n_errors;
                continue;
            }
            fixed_budget   budget(16);
            std::int64_t   drafted = 0;
            drafter_params dp;
            dp.use_context = false;  // drafts from the (garbage) datastore only
            for (size_t i = 0; i < prompts.size(); ++i) {
                drafter d(ds.get(), nullptr, dp);
                const auto spec = rest_test::generate_greedy(*m, *ctx, prompts[i], 48, &d, 16, &budget);
                const auto v = compare_to_plain(plains[i].trace(), spec.tokens, rest_test::k_tie_eps,
                                                rest_test::resume_plain(*m, *ctx, prompts[i], 48));
                EXPECT_TRUE(v.ok) << what << ", prompt " << i << ": " << v.why;
                drafted += spec.stats.n_drafted;
            }
            if (how == garbage::sparse) {
                EXPECT_GT(drafted, 0) << what << ": the garbage index was not drafted from";
            }
            if (how == garbage::sparse && which == section::text) {
                // Its drafts carry ids past the vocabulary: what the decoder must cut before llama.cpp sees them.
                int oov = 0;
                for (size_t i = 0; i < prompts.size(); ++i) {
                    drafter d(ds.get(), nullptr, dp);
                    std::vector<token_id> ctx = prompts[i];
                    ctx.insert(ctx.end(), plains[i].tokens.begin(), plains[i].tokens.begin() + 8);
                    d.reset(ctx);
                    for (const token_id t : d.draft(64).tokens) oov += t >= m->info().n_vocab;
                }
                EXPECT_GT(oov, 0) << "no draft token past the vocabulary: the decoder's cut is not exercised";
            }
            n_drafted_total += drafted;
            ++n_generated;
        }
    }
    std::printf("garbage sections: %d refused at open, %d generated from (%lld datastore draft nodes; outputs = plain)\n",
                n_errors, n_generated, (long long) n_drafted_total);
    EXPECT_EQ(n_errors + n_generated, 25);
    EXPECT_GE(n_errors, 3) << "a garbage first-token table is refused at open";
}

}  // namespace
