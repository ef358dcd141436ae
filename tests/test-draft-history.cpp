// history_store: FIFO bound by tokens, segment suffix arrays equal to a naive sort, snapshot isolation, concurrent
// use, save/load round trips and one-line errors for bad files.
#include "rest/drafter.h"
#include "rest/history-store.h"

#include "ref/ref-draft.h"
#include "test-util.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace rest;

namespace {

std::vector<std::vector<token_id>> stored_documents(const history_store & h) {
    std::vector<std::vector<token_id>> docs;
    for (const auto & seg : h.snapshot()->segments) {
        for (auto & d : seg->documents()) {
            docs.push_back(std::move(d));
        }
    }
    return docs;
}

std::string temp_path(const std::string & name) {
    const char * env = std::getenv("REST_TEST_TMP");
    const std::string dir = env ? env : std::filesystem::temp_directory_path().string();
    std::filesystem::create_directories(dir);
    return dir + "/" + name;
}

}  // namespace

TEST(draft_history, fifo_bound_and_segments) {
    std::mt19937        rng(31);
    const std::uint64_t cap = 1000;
    history_store       h({.n_tokens_max = cap});
    std::vector<std::vector<token_id>> added;
    std::uint64_t       total_added = 0;
    for (int i = 0; i < 400; ++i) {
        auto doc = rest_ref::random_documents(rng, 1, 250, 40)[0];
        h.add(doc);
        added.push_back(doc);
        total_added += doc.size();
        const auto stored = stored_documents(h);
        ASSERT_LE(h.n_tokens(), cap) << "add " << i;
        ASSERT_EQ(h.n_documents(), stored.size());
        // What is stored is the newest documents, in order.
        ASSERT_LE(stored.size(), added.size());
        for (std::size_t k = 0; k < stored.size(); ++k) {
            ASSERT_EQ(stored[k], added[added.size() - stored.size() + k]) << "add " << i << " document " << k;
        }
        if (total_added > cap) {
            ASSERT_GE(h.n_tokens(), cap * 3 / 4) << "add " << i << ": eviction dropped too much";
        }
        ASSERT_LE(h.snapshot()->segments.size(), 16u) << "add " << i;
    }
    for (const auto & seg : h.snapshot()->segments) {
        std::vector<token_id> text;
        for (const std::uint32_t v : seg->text) {
            text.push_back(v == 0xFFFFFFFFu ? k_doc_end : static_cast<token_id>(v));
        }
        ASSERT_EQ(seg->sa, rest_ref::naive_suffix_array(text));
        ASSERT_EQ(seg->shard.n_suffixes(), seg->sa.size());
    }
}

TEST(draft_history, long_document_keeps_its_tail_and_empty_is_ignored) {
    history_store         h({.n_tokens_max = 10});
    std::vector<token_id> doc(25);
    for (int i = 0; i < 25; ++i) {
        doc[static_cast<std::size_t>(i)] = i;
    }
    h.add(std::vector<token_id>{});
    EXPECT_EQ(h.n_documents(), 0u);
    h.add(doc);
    const auto stored = stored_documents(h);
    ASSERT_EQ(stored.size(), 1u);
    EXPECT_EQ(stored[0], std::vector<token_id>(doc.end() - 10, doc.end()));
    EXPECT_THROW(h.add(std::vector<token_id>{1, -1}), std::invalid_argument);
}

TEST(draft_history, snapshots_are_immutable) {
    history_store h({.n_tokens_max = 100});
    h.add(std::vector<token_id>{1, 2, 3});
    const auto snap = h.snapshot();
    for (int i = 0; i < 50; ++i) {
        h.add(std::vector<token_id>{4, 5, 6, 7});
    }
    EXPECT_EQ(snap->n_documents, 1u);
    EXPECT_EQ(snap->segments[0]->documents()[0], (std::vector<token_id>{1, 2, 3}));
    EXPECT_GT(h.snapshot()->version, snap->version);
    h.clear();
    EXPECT_EQ(h.n_tokens(), 0u);
    EXPECT_EQ(snap->n_tokens, 3u);
}

TEST(draft_history, save_load_round_trip) {
    std::mt19937  rng(32);
    history_store h({.n_tokens_max = 5000, .fingerprint = 77});
    for (const auto & d : rest_ref::random_documents(rng, 60, 150, 1000)) {
        h.add(d);
    }
    const std::string path = temp_path("draft-history.bin");
    h.save(path);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));

    history_store same({.n_tokens_max = 5000, .fingerprint = 77});
    same.load(path);
    EXPECT_EQ(stored_documents(same), stored_documents(h));
    EXPECT_EQ(same.n_tokens(), h.n_tokens());

    history_store small({.n_tokens_max = 300});
    small.load(path);
    const auto all = stored_documents(h), kept = stored_documents(small);
    ASSERT_FALSE(kept.empty());
    EXPECT_LE(small.n_tokens(), 300u);
    for (std::size_t k = 0; k < kept.size(); ++k) {
        if (k == 0 && kept[0] != all[all.size() - kept.size()]) {
            continue;  // the oldest kept may be the tail of a document longer than the bound
        }
        EXPECT_EQ(kept[k], all[all.size() - kept.size() + k]) << "document " << k;
    }

    // The loaded store searches like the original.
    drafter_params p;
    p.use_datastore = false;
    p.use_context   = false;
    drafter a(nullptr, &h, p), b(nullptr, &same, p);
    const auto doc = all[all.size() / 2];
    const std::vector<token_id> prompt(doc.begin(), doc.begin() + std::min<std::ptrdiff_t>(3, doc.size()));
    a.reset(prompt);
    b.reset(prompt);
    EXPECT_EQ(a.draft(16).tokens, b.draft(16).tokens);
}

TEST(draft_history, bad_files_are_user_errors) {
    history_store h({.n_tokens_max = 100, .fingerprint = 5});
    h.add(std::vector<token_id>{1, 2, 3, 4});
    const std::string good = temp_path("draft-history-good.bin");
    h.save(good);
    std::vector<char> bytes;
    {
        std::ifstream in(good, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto write = [&](const std::string & name, const std::vector<char> & b) {
        const std::string p = temp_path(name);
        std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
        return p;
    };
    auto expect_error = [&](const std::string & path, const std::string & what, std::uint64_t fp = 5) {
        history_store t({.n_tokens_max = 100, .fingerprint = fp});
        try {
            t.load(path);
            ADD_FAILURE() << "no error for " << what;
        } catch (const user_error & e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(path), std::string::npos) << what << ": " << msg;
            EXPECT_NE(msg.find(what), std::string::npos) << msg;
            EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        }
    };
    expect_error(temp_path("draft-history-missing.bin"), "cannot open");
    std::vector<char> b = bytes;
    b[0]                = 'X';
    expect_error(write("draft-history-magic.bin", b), "bad magic");
    expect_error(write("draft-history-short.bin", {bytes.begin(), bytes.begin() + 20}), "truncated");
    b = bytes;
    b.pop_back();
    expect_error(write("draft-history-cut.bin", b), "the header says");
    b    = bytes;
    b[8] = 9;  // version
    expect_error(write("draft-history-version.bin", b), "format version 9");
    b = bytes;
    b[b.size() - 2] ^= 0x40;
    expect_error(write("draft-history-flip.bin", b), "checksum");
    expect_error(good, "fingerprint", 6);
    history_store any({.n_tokens_max = 100});  // fingerprint 0 accepts any
    EXPECT_NO_THROW(any.load(good));
}

TEST(draft_history, concurrent_writers_and_drafters) {
    history_store     h({.n_tokens_max = 4000});
    std::atomic<bool> stop{false};
    std::atomic<int>  n_drafts{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
        threads.emplace_back([&, w] {
            std::mt19937 rng(40 + w);
            for (int i = 0; i < 150; ++i) {
                h.add(rest_ref::random_documents(rng, 1, 120, 30)[0]);
            }
        });
    }
    for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
            std::mt19937   rng(50 + r);
            drafter_params p;
            p.use_datastore = false;
            drafter dr(nullptr, &h, p);
            while (!stop) {
                dr.reset(rest_ref::random_documents(rng, 1, 20, 30)[0]);
                for (int s = 0; s < 10; ++s) {
                    const draft_tree t = dr.draft(16);
                    EXPECT_EQ(t.check_integrity(), "");
                    dr.accept(std::vector<token_id>{static_cast<token_id>(rng() % 30)});
                    n_drafts++;
                }
                dr.finish();
            }
        });
    }
    threads[0].join();
    threads[1].join();
    stop = true;
    threads[2].join();
    threads[3].join();
    EXPECT_LE(h.n_tokens(), 4000u);
    EXPECT_GT(n_drafts.load(), 0);
    std::uint64_t n = 0;
    for (const auto & d : stored_documents(h)) {
        n += d.size();
    }
    EXPECT_EQ(n, h.n_tokens());
}
