// Named corpora under `rest serve --corpus-dir` (apps/server/corpora.h): POST/GET/DELETE /v1/corpora, a request's
// `corpus` field picks what drafts for it, and the corpora survive a restart. On stories260K (skipped, visibly,
// without ../shared/data), with the online store off so that only the corpora can draft past the prompt.
#include "test-server-util.h"

#include "rest/datastore.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using json = nlohmann::json;
using namespace rest_test;

namespace {

namespace fs = std::filesystem;

const std::string k_prompt = "Once upon a time";

std::vector<std::string> serve_args(const std::string & model, const std::string & dir) {
    // --draft-fixed: the same drafts verified before and after the restart (and no cost calibration at start-up).
    return {"-m", model, "--corpus-dir", dir, "-t", "1", "--np", "1", "--history-max", "0", "--draft-fixed", "8"};
}

json complete(const client & c, const json & extra) {
    json body = {{"prompt", k_prompt}, {"max_tokens", 64}, {"temperature", 0}};
    body.update(extra);
    const http_reply r = c.post("/v1/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json;
}

json corpora(const client & c) {
    json             by_name = json::object();
    const http_reply r       = c.get("/v1/corpora");
    for (const auto & e : r.json["data"]) by_name[e["name"].get<std::string>()] = e;
    return by_name;
}

TEST(ServerCorpora, RequestsDraftOnlyFromTheirCorporaWhichSurviveARestart) {
    const std::string model = stories_model();
    if (model.empty()) {
        GTEST_SKIP() << "../shared/data is absent (set REST_SHARED_DATA): stories260K is needed";
    }
    const std::string dir = tmp_dir() + "/server-corpora";
    fs::remove_all(dir);
    std::string plain;
    int         accepted_alpha = 0;
    {
        server_process srv;
        ASSERT_EQ(srv.start(serve_args(model, dir), tmp_dir() + "/server-corpora-1.log"), "");
        const client c(srv.port());
        plain = complete(c, {{"speculate", false}})["choices"][0]["text"].get<std::string>();
        // alpha holds the plain continuation; beta text the model does not continue with.
        const http_reply a = c.post("/v1/corpora", json{{"name", "alpha"}, {"text", k_prompt + plain}});
        ASSERT_EQ(a.status, 200) << a.body;
        const http_reply b = c.post("/v1/corpora", json{{"name", "beta"},
                                                        {"documents", {"Zebras graze on the dry savanna at noon.",
                                                                       "Compilers translate source code into machine code."}}});
        ASSERT_EQ(b.status, 200) << b.body;
        EXPECT_EQ(b.json["n_documents"], 2);
        const http_reply b2 = c.post("/v1/corpora", json{{"name", "beta"}, {"text", "Ships sail across the sea."}});
        EXPECT_EQ(b2.json["n_documents"], 3) << "a second POST appends";

        const json ja = complete(c, {{"corpus", "alpha"}});
        const json jb = complete(c, {{"corpus", json::array({"beta"})}});
        const json jall = complete(c, json::object());
        for (const json * j : {&ja, &jb, &jall}) EXPECT_EQ((*j)["choices"][0]["text"], plain) << "speculation is lossless";
        accepted_alpha         = ja["rest"]["n_accepted"].get<int>();
        const int accepted_b   = jb["rest"]["n_accepted"].get<int>();
        const int accepted_all = jall["rest"]["n_accepted"].get<int>();
        // alpha's drafts carry the whole continuation; a request limited to beta must not see them.
        EXPECT_GT(accepted_alpha, 40);
        EXPECT_LT(accepted_b, accepted_alpha / 2) << "a request limited to beta drafted from alpha";
        EXPECT_EQ(accepted_all, accepted_alpha) << "the default is every corpus";

        // Errors: unknown corpus in a request, a bad name, deleting what is not there.
        EXPECT_EQ(c.post("/v1/completions", json{{"prompt", "x"}, {"corpus", "gamma"}}).status, 400);
        EXPECT_EQ(c.post("/v1/completions", json{{"prompt", "x"}, {"corpus", 7}}).status, 400);
        EXPECT_EQ(c.post("/v1/corpora", json{{"name", "../up"}, {"text", "x"}}).status, 400);
        EXPECT_EQ(c.post("/v1/corpora", json{{"name", "ok"}}).status, 400);
        EXPECT_EQ(c.del("/v1/corpora/gamma").status, 404);

        // Generated text never goes into a corpus.
        for (int i = 0; i < 5; ++i) complete(c, {{"prompt", "The little dog " + std::to_string(i)}});
        EXPECT_EQ(corpora(c)["alpha"]["n_documents"], 1);
        // A corpus grown one document a request keeps few shards (each POST used to add one, and every lookup
        // searched each): the small trailing ones merge as it grows.
        for (int i = 0; i < 40; ++i) {
            const http_reply g = c.post("/v1/corpora", json{{"name", "gamma"}, {"text", "Story " + std::to_string(i) +
                                                                                       " of a cat who sat."}});
            ASSERT_EQ(g.status, 200) << g.body;
        }
        EXPECT_EQ(corpora(c)["gamma"]["n_documents"], 40);
        EXPECT_LE(rest::datastore::open(dir + "/gamma.idx")->info().n_shards, 7u);
        srv.signal(SIGTERM);
        ASSERT_EQ(srv.wait_exit(60), 0) << srv.log_tail();
    }
    EXPECT_TRUE(fs::exists(dir + "/alpha.idx"));
    // Temp copies a killed server left mid-write are removed at start; one a live writer holds locked (another
    // server sharing the directory) is kept, whatever its pid says (a container's servers are all pid 1).
    const std::string stale = dir + "/alpha.idx.tmp.1", live = dir + "/beta.idx.tmp.1";
    std::ofstream(stale) << "partial";
    std::ofstream(live) << "partial";
    const int live_fd = ::open(live.c_str(), O_RDONLY);
    ASSERT_GE(live_fd, 0);
    ASSERT_EQ(::flock(live_fd, LOCK_EX), 0);
    // A good index copied in under names a POST refuses is not served (it could be used but never made alike).
    for (const char * odd : {"/.hidden.idx", "/bad name.idx"}) fs::copy_file(dir + "/alpha.idx", dir + odd);
    server_process srv;
    ASSERT_EQ(srv.start(serve_args(model, dir), tmp_dir() + "/server-corpora-2.log"), "");
    const client c(srv.port());
    const json   listed = corpora(c);
    EXPECT_FALSE(fs::exists(stale));
    EXPECT_TRUE(fs::exists(live));
    ::close(live_fd);
    fs::remove(live);
    EXPECT_EQ(listed["alpha"]["n_documents"], 1) << listed.dump();
    EXPECT_EQ(listed["beta"]["n_documents"], 3) << listed.dump();
    EXPECT_FALSE(listed.contains(".hidden") || listed.contains("bad name")) << listed.dump();
    EXPECT_EQ(listed.size(), 3u) << listed.dump();  // alpha, beta, gamma
    const json again = complete(c, {{"corpus", "alpha"}});
    EXPECT_EQ(again["choices"][0]["text"], plain);
    EXPECT_EQ(again["rest"]["n_accepted"].get<int>(), accepted_alpha) << "alpha drafts as before the restart";

    const http_reply d = c.del("/v1/corpora/beta");
    EXPECT_EQ(d.status, 200) << d.body;
    EXPECT_FALSE(corpora(c).contains("beta"));
    EXPECT_FALSE(fs::exists(dir + "/beta.idx"));
    EXPECT_EQ(c.post("/v1/completions", json{{"prompt", "x"}, {"corpus", "beta"}}).status, 400);
    srv.signal(SIGTERM);
    EXPECT_EQ(srv.wait_exit(60), 0) << srv.log_tail();
}

}  // namespace
