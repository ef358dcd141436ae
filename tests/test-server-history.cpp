// The online store's file under `rest serve` (apps/server/history-persist.h): periodic snapshots survive kill -9,
// one server per file, and a damaged file is set aside instead of stopping the server or being lost.
// The History* cases drive history_persist directly; the Server* cases run the real binary on stories260K (skipped,
// visibly, without ../shared/data).
#include "history-persist.h"
#include "test-server-util.h"

#include "rest/history-store.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

using json = nlohmann::json;
using namespace rest_test;

namespace {

// A fresh path in the test directory, with its lock file and set-aside copies from earlier runs removed.
std::string fresh_store_path(const std::string & name) {
    const std::string path = tmp_dir() + "/" + name;
    for (const auto & e : std::filesystem::directory_iterator(tmp_dir())) {
        if (e.path().filename().string().rfind(name, 0) == 0) {
            std::filesystem::remove(e.path());
        }
    }
    return path;
}

std::vector<std::string> set_aside_files(const std::string & path) {
    const std::string        prefix = std::filesystem::path(path).filename().string() + ".corrupt-";
    std::vector<std::string> out;
    for (const auto & e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
        if (e.path().filename().string().rfind(prefix, 0) == 0) {
            out.push_back(e.path().string());
        }
    }
    return out;
}

std::string read_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string & path, const std::string & bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string garbage(std::size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    // The right magic and version, so only the checksums and the checks behind them can reject it.
    std::string s = std::string("RESTHIST") + '\x01' + std::string(3, '\0');
    while (s.size() < n) {
        s.push_back(static_cast<char>(rng()));
    }
    return s;
}

// The file's inode: every save renames a new file into place, so an unchanged inode means no save happened.
ino_t inode_of(const std::string & path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Polls until the file at path loads with n_documents documents, up to timeout_s. Returns the seconds it took,
// or -1.
double wait_for_saved(const std::string & path, std::uint64_t n_documents, double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    while (true) {
        try {
            rest::history_store h;
            h.load(path);
            if (h.n_documents() == n_documents) {
                return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            }
        } catch (const rest::user_error &) {
            // not written yet
        }
        if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(timeout_s)) {
            return -1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

std::vector<std::string> serve_args(const std::string & model, const std::string & store,
                                    const std::string & interval) {
    // --draft-fixed: no cost calibration at start-up, which these tests do not need.
    return {"-m", model, "-c", "512", "--np", "1", "-t", "1", "--draft-fixed", "2", "--history-file", store,
            "--history-save-interval", interval};
}

json corpus_history(const client & c) {
    const http_reply r = c.get("/v1/corpus");
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json.is_object() ? r.json["history"] : json();
}

}  // namespace

TEST(History, SecondHolderOfTheSameFileIsRefused) {
    const std::string path = fresh_store_path("persist-lock.bin");
    {
        history_persist first(path, 0);
        try {
            history_persist second(path, 0);
            ADD_FAILURE() << "a second holder of " << path << " was allowed";
        } catch (const rest::user_error & e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(path), std::string::npos) << msg;
            EXPECT_NE(msg.find("in use by process " + std::to_string(::getpid())), std::string::npos) << msg;
            EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        }
    }
    EXPECT_NO_THROW(history_persist again(path, 0));  // the lock went with its holder
}

TEST(History, DamagedFileIsSetAsideAndTheStoreStartsEmpty) {
    const std::string path = fresh_store_path("persist-damaged.bin");
    const std::string bad  = garbage(300, 1);
    write_file(path, bad);
    rest::history_store store;
    store.add(std::vector<rest::token_id>{1, 2, 3});  // a load that fails must not leave this behind either
    history_persist p(path, 0);
    p.load(store);
    EXPECT_EQ(store.n_documents(), 0u);
    EXPECT_FALSE(std::filesystem::exists(path));
    const auto aside = set_aside_files(path);
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_EQ(read_file(aside[0]), bad);

    // A second damaged file within the same second gets its own name: nothing is overwritten.
    write_file(path, garbage(200, 2));
    rest::history_store other;
    p.load(other);
    EXPECT_EQ(set_aside_files(path).size(), 2u);
    EXPECT_EQ(read_file(aside[0]), bad);

    EXPECT_FALSE(p.stop_and_save());  // nothing to write: the empty store was never changed
    EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(History, PeriodicSavesOnlyWhenChanged) {
    const std::string   path = fresh_store_path("persist-periodic.bin");
    rest::history_store store;
    history_persist     p(path, 0.05);
    p.load(store);
    p.start();
    store.add(std::vector<rest::token_id>{4, 5, 6});
    ASSERT_GE(wait_for_saved(path, 1, 10), 0) << "no periodic save within 10 s";
    const ino_t first = inode_of(path);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // six intervals without a change
    EXPECT_EQ(inode_of(path), first) << "saved although nothing changed";
    store.add(std::vector<rest::token_id>{7, 8});
    EXPECT_GE(wait_for_saved(path, 2, 10), 0) << "the change was not saved within 10 s";
    EXPECT_NE(inode_of(path), first);
    EXPECT_FALSE(p.stop_and_save());  // already on disk
    store.add(std::vector<rest::token_id>{9});
    EXPECT_TRUE(p.stop_and_save());
    EXPECT_GE(wait_for_saved(path, 3, 0), 0);
}

TEST(ServerHistory, KillNineLosesAtMostTheLastInterval) {
    const std::string model = stories_model();
    if (model.empty()) {
        GTEST_SKIP() << "../shared/data is absent (set REST_SHARED_DATA): stories260K is needed";
    }
    const std::string store = fresh_store_path("server-history-kill.bin");
    std::uint64_t     n_documents = 0, n_tokens = 0;
    {
        server_process srv;
        ASSERT_EQ(srv.start(serve_args(model, store, "1"), tmp_dir() + "/server-history-kill-1.log"), "");
        const client c(srv.port());
        for (const char * prompt : {"Once upon a time", "The little dog", "Lily and Ben"}) {
            const http_reply r = c.post("/v1/completions",
                                        json{{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0}});
            ASSERT_EQ(r.status, 200) << r.body;
            const int n = r.json["usage"]["completion_tokens"].get<int>();
            n_documents += n > 0;
            n_tokens += (std::uint64_t) n;
        }
        ASSERT_GT(n_documents, 0u);
        // Outputs join the store off the engine thread: wait until all are in.
        for (int i = 0; i < 500 && corpus_history(c)["n_documents"] != n_documents; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        ASSERT_EQ(corpus_history(c)["n_documents"], n_documents);
        const auto in_store = std::chrono::steady_clock::now();
        // The snapshot must reach the disk within about one interval (1 s; slack for a loaded machine).
        const double waited = wait_for_saved(store, n_documents, 10);
        ASSERT_GE(waited, 0) << "no snapshot within 10 s; log: " << srv.log_tail();
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - in_store).count(), 3.0);
        srv.signal(SIGKILL);  // no shutdown code runs: only the periodic snapshot can have saved anything
        EXPECT_EQ(srv.wait_exit(30), 128 + SIGKILL);
    }
    server_process srv;  // the lock died with the killed process
    ASSERT_EQ(srv.start(serve_args(model, store, "1"), tmp_dir() + "/server-history-kill-2.log"), "");
    const json h = corpus_history(client(srv.port()));
    EXPECT_EQ(h["n_documents"], n_documents) << h.dump();
    EXPECT_EQ(h["n_tokens"], n_tokens) << h.dump();
    srv.signal(SIGTERM);
    EXPECT_EQ(srv.wait_exit(60), 0) << srv.log_tail();
}

TEST(ServerHistory, SecondServerOnTheSameFileRefusesToStart) {
    const std::string model = stories_model();
    if (model.empty()) {
        GTEST_SKIP() << "../shared/data is absent (set REST_SHARED_DATA): stories260K is needed";
    }
    const std::string store = fresh_store_path("server-history-lock.bin");
    server_process    first;
    ASSERT_EQ(first.start(serve_args(model, store, "60"), tmp_dir() + "/server-history-lock.log"), "");

    // timeout: a second server that wrongly starts fails this test instead of hanging it.
    std::string cmd = "timeout 60 " + rest_bin() + " serve --port 0";
    for (const auto & a : serve_args(model, store, "60")) {
        cmd += " '" + a + "'";
    }
    const auto [out, rc] = run_command(cmd, true);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;  // one line, and no "listening" line
    EXPECT_NE(out.find("rest: error: online store " + store + " is in use"), std::string::npos) << out;

    EXPECT_EQ(client(first.port()).get("/health").status, 200);  // the first server is untouched
    first.signal(SIGTERM);
    EXPECT_EQ(first.wait_exit(60), 0) << first.log_tail();
}

TEST(ServerHistory, GarbledFileIsSetAsideAndTheServerStartsEmpty) {
    const std::string model = stories_model();
    if (model.empty()) {
        GTEST_SKIP() << "../shared/data is absent (set REST_SHARED_DATA): stories260K is needed";
    }
    const std::string store = fresh_store_path("server-history-garbled.bin");
    const std::string bad   = garbage(1000, 3);
    write_file(store, bad);
    const std::string log = tmp_dir() + "/server-history-garbled.log";
    server_process    srv;
    ASSERT_EQ(srv.start(serve_args(model, store, "1"), log), "");
    const client c(srv.port());
    EXPECT_EQ(corpus_history(c)["n_documents"], 0);

    const auto aside = set_aside_files(store);
    ASSERT_EQ(aside.size(), 1u);
    EXPECT_EQ(read_file(aside[0]), bad);  // kept byte for byte
    const std::string text     = read_file(log);
    const std::size_t at       = text.find("warning: history store " + store);
    ASSERT_NE(at, std::string::npos) << text;
    const std::string warning  = text.substr(at, text.find('\n', at) - at);
    EXPECT_NE(warning.find("kept it as " + aside[0]), std::string::npos) << warning;
    EXPECT_NE(warning.find("empty online store"), std::string::npos) << warning;

    // The server works and its next save goes to the original name, beside the kept file.
    const http_reply r = c.post("/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 8}});
    ASSERT_EQ(r.status, 200) << r.body;
    srv.signal(SIGTERM);
    EXPECT_EQ(srv.wait_exit(60), 0) << srv.log_tail();
    EXPECT_GE(wait_for_saved(store, 1, 0), 0);
    EXPECT_EQ(read_file(aside[0]), bad);
}
