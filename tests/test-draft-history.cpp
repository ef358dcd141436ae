// history_store: FIFO bound by tokens, segment suffix arrays equal to a naive sort, snapshot isolation, concurrent
// use, save/load round trips and one-line errors for bad files, also for every truncation and random damage.
#include "rest/drafter.h"
#include "rest/history-store.h"
#include "draft/history-file.h"

#include "ref/ref-draft.h"
#include "test-util.h"

#include <gtest/gtest.h>

// Header-only, so the test can forge files whose checksums pass and reach the payload checks.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
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

namespace {

std::vector<char> read_bytes(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string write_bytes(const std::string & name, const std::vector<char> & b) {
    const std::string p = temp_path(name);
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
    return p;
}

// Loads path into a store that already holds one document. Returns the error message, "" when it loaded; a failed
// load must leave the store as it was (it publishes only a whole file).
std::string load_error(const std::string & path) {
    history_store               h({.n_tokens_max = 1000});
    const std::vector<token_id> before = {7, 8, 9};
    h.add(before);
    try {
        h.load(path);
    } catch (const user_error & e) {
        const std::string msg = e.what();
        EXPECT_EQ(stored_documents(h), std::vector<std::vector<token_id>>{before}) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        return msg.empty() ? "(empty message)" : msg;
    }
    for (const auto & d : stored_documents(h)) {
        for (const token_id t : d) {
            EXPECT_GE(t, 0);
        }
    }
    EXPECT_LE(h.n_tokens(), 1000u);
    return "";
}

// Files with valid checksums are forged with the store's own header (draft/history-file.h).
using forged_header = rest::history_file::header;

std::vector<char> forge_file(const std::vector<char> & payload, std::uint64_t n_tokens) {
    forged_header hd{};
    std::memcpy(hd.magic, "RESTHIST", 8);
    hd.version          = 1;
    hd.header_bytes     = sizeof(hd);
    hd.n_tokens         = n_tokens;
    hd.payload_bytes    = payload.size();
    hd.payload_checksum = XXH3_64bits(payload.data(), payload.size());
    hd.header_checksum  = XXH3_64bits(&hd, offsetof(forged_header, header_checksum));
    std::vector<char> b(sizeof(hd));
    std::memcpy(b.data(), &hd, sizeof(hd));
    b.insert(b.end(), payload.begin(), payload.end());
    return b;
}

}  // namespace

// A crash mid-write is what the server's atomic save prevents, but a file can still be cut short or damaged on
// disk; every such file must be a one-line user_error, never a crash or an allocation sized by garbage.
TEST(draft_history, every_truncation_is_a_user_error) {
    std::mt19937  rng(40);
    history_store h({.n_tokens_max = 1000, .fingerprint = 3});
    for (const auto & d : rest_ref::random_documents(rng, 5, 12, 100)) {
        h.add(d);
    }
    const std::string good  = temp_path("draft-history-prefix-src.bin");
    h.save(good);
    const std::vector<char> bytes = read_bytes(good);
    ASSERT_GT(bytes.size(), 64u + 5 * 4);
    ASSERT_EQ(load_error(good), "");
    for (std::size_t n = 0; n < bytes.size(); ++n) {
        const std::string path = write_bytes("draft-history-prefix.bin", {bytes.begin(), bytes.begin() + n});
        EXPECT_NE(load_error(path), "") << "a " << n << "-byte prefix of " << bytes.size() << " loaded";
    }
}

TEST(draft_history, garbled_bytes_are_user_errors) {
    std::mt19937  rng(41);
    history_store h({.n_tokens_max = 1000});
    for (const auto & d : rest_ref::random_documents(rng, 8, 20, 300)) {
        h.add(d);
    }
    const std::string good = temp_path("draft-history-garble-src.bin");
    h.save(good);
    const std::vector<char> bytes = read_bytes(good);
    std::uniform_int_distribution<int> byte(0, 255);
    // A few damaged bytes anywhere: the header fields, the lengths, the tokens.
    for (int trial = 0; trial < 1000; ++trial) {
        std::vector<char> b = bytes;
        const int         n_damaged = 1 + trial % 8;
        for (int k = 0; k < n_damaged; ++k) {
            const std::size_t at = std::uniform_int_distribution<std::size_t>(0, b.size() - 1)(rng);
            b[at] = static_cast<char>(b[at] ^ (1 + byte(rng) % 255));  // always a different value
        }
        const std::string path = write_bytes("draft-history-garbled.bin", b);
        EXPECT_NE(load_error(path), "") << "trial " << trial << ": a damaged file loaded";
    }
    // Random bytes, with and without the magic, of every small length and some large ones.
    for (int trial = 0; trial < 300; ++trial) {
        const std::size_t n = trial < 200 ? trial : std::uniform_int_distribution<std::size_t>(0, 1 << 16)(rng);
        std::vector<char> b(n);
        for (char & c : b) {
            c = static_cast<char>(byte(rng));
        }
        if (trial % 2 == 1 && n >= 8) {
            std::memcpy(b.data(), "RESTHIST", 8);
        }
        const std::string path = write_bytes("draft-history-random.bin", b);
        EXPECT_NE(load_error(path), "") << "trial " << trial << ": " << n << " random bytes loaded";
    }
}

// Checksums pass, the payload lies: lengths past the end, tokens past INT32_MAX, a wrong token count, a payload
// that is not whole words. The lengths the file claims must be checked before anything is sized by them.
TEST(draft_history, forged_payloads_never_crash) {
    std::mt19937                            rng(42);
    std::uniform_int_distribution<uint32_t> any_word;
    int                                     n_loaded = 0, n_refused = 0;
    std::map<std::string, int>              n_by_check;  // which payload check refused, to prove each is reached
    for (int trial = 0; trial < 2000; ++trial) {
        std::vector<std::uint32_t> words;
        std::uint64_t              n_tokens = 0;
        const int                  n_docs   = trial % 6;
        for (int k = 0; k < n_docs; ++k) {
            const std::uint32_t len = std::uniform_int_distribution<std::uint32_t>(0, 20)(rng);
            words.push_back(len);
            for (std::uint32_t i = 0; i < len; ++i) {
                words.push_back(std::uniform_int_distribution<std::uint32_t>(0, 5000)(rng));
            }
            n_tokens += len;
        }
        switch (trial % 5) {
            case 0: break;  // well formed
            case 1: if (!words.empty()) { words[std::uniform_int_distribution<std::size_t>(0, words.size() - 1)(rng)] = any_word(rng); } break;
            case 2: words.push_back(any_word(rng)); break;  // a length with nothing after it
            case 3: n_tokens += 1 + trial % 3; break;
            case 4: if (!words.empty()) { words.back() = 0x80000000u + (any_word(rng) >> 1); } break;
        }
        std::vector<char> payload(words.size() * 4);
        std::memcpy(payload.data(), words.data(), payload.size());
        if (trial % 7 == 3) {
            payload.push_back('x');  // not a whole number of words
        }
        const std::string path = write_bytes("draft-history-forged.bin", forge_file(payload, n_tokens));
        const std::string err  = load_error(path);
        (err.empty() ? n_loaded : n_refused)++;
        for (const char * check : {"runs past the end", "invalid token", "tokens, the header says"}) {
            n_by_check[check] += err.find(check) != std::string::npos;
        }
        if (trial % 5 == 0 && trial % 7 != 3) {
            EXPECT_EQ(err, "") << "trial " << trial << ": a well-formed forged file was refused";
        }
    }
    EXPECT_GT(n_loaded, 0);
    EXPECT_GT(n_refused, 0);
    for (const auto & [check, n] : n_by_check) {
        EXPECT_GT(n, 0) << "no forged file reached the check '" << check << "'";
    }
}

TEST(draft_history, concurrent_writers_and_drafters) {
    history_store     h({.n_tokens_max = 4000});
    std::atomic<bool> stop{false};
    std::atomic<int>  n_drafts{0};
    std::atomic<int>  n_drafters_started{0};
    std::vector<std::thread> threads;
    // The writers wait for both drafters, and each drafter finishes at least one round: on a loaded machine (CTest
    // -j2) the writers could otherwise finish before a drafter ran at all.
    for (int w = 0; w < 2; ++w) {
        threads.emplace_back([&, w] {
            while (n_drafters_started < 2) std::this_thread::yield();
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
            n_drafters_started++;
            do {
                dr.reset(rest_ref::random_documents(rng, 1, 20, 30)[0]);
                for (int s = 0; s < 10; ++s) {
                    const draft_tree t = dr.draft(16);
                    EXPECT_EQ(t.check_integrity(), "");
                    dr.accept(std::vector<token_id>{static_cast<token_id>(rng() % 30)});
                    n_drafts++;
                }
                dr.finish();
            } while (!stop);
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
