// Shared helpers for tests: temp dirs, shared data lookup, cached fixture models.
#pragma once

#include "rest/fixture.h"
#include "rest/llama-model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace rest_test {

inline std::string tmp_dir() {
    const char * env = std::getenv("REST_TEST_TMP");
    std::string  dir = env ? env : (std::filesystem::temp_directory_path() / "rest-test").string();
    std::filesystem::create_directories(dir);
    return dir;
}

// ../shared/data, or "" when absent (tests then GTEST_SKIP()).
inline std::string shared_data() {
    const char * env = std::getenv("REST_SHARED_DATA");
    if (env && std::filesystem::exists(std::string(env) + "/models/stories260K.gguf")) {
        return env;
    }
    return "";
}

// Loads a model for a test; REST_TEST_NGL=N offloads N layers (bench/gpu-check.sh runs the lossless tests so).
inline std::unique_ptr<rest::model> load_model(const std::string & path) {
    const char * ngl = std::getenv("REST_TEST_NGL");
    return rest::model::load(path, ngl ? std::atoi(ngl) : 0);
}

inline std::string rest_bin() {
    const char * env = std::getenv("REST_BIN");
    return env ? std::string(env) + "/rest" : "rest";
}

// A fixture model written once per test run and reused (keyed by its parameters).
inline std::string fixture_model(const rest::fixture_params & p) {
    std::string vocab = p.vocab;  // a name, or a GGUF path: flattened into the file name
    std::replace_if(vocab.begin(), vocab.end(), [](char c) { return c == '/' || c == '.'; }, '_');
    const std::string name = "fixture-" + vocab + "-l" + std::to_string(p.n_layer) + "-e" + std::to_string(p.n_embd) +
                             "-h" + std::to_string(p.n_head) + "-" + std::to_string(p.n_head_kv) + "-f" +
                             std::to_string(p.n_ff) + "-c" + std::to_string(p.n_ctx) + "-s" + std::to_string(p.seed) +
                             "-" + p.type + "-o" + std::to_string((int) (p.output_scale * 100)) + ".gguf";
    const std::string path = tmp_dir() + "/" + name;
    if (!std::filesystem::exists(path)) {
        rest::write_fixture_model(path, p);
    }
    return path;
}

}  // namespace rest_test
