// Running the built `rest` binary from tests: exit code, signal, stdout and stderr.
#pragma once

#include "test-util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace rest_test {

struct cli_result {
    int         code     = -1;
    bool        signaled = false;
    std::string out, err;

    // A clean user-facing failure: exit 1..127, no signal, exactly one line on stderr.
    // An error after other lines a first run prints (a cold cache measures the verify cost and says so): the
    // process exited with a code, and its last line is the error.
    bool ends_in_error() const {
        std::string e = err;
        while (!e.empty() && e.back() == '\n') e.pop_back();
        const size_t nl = e.rfind('\n');
        const size_t last = nl == std::string::npos ? 0 : nl + 1;
        return !signaled && code > 0 && code < 128 && e.compare(last, 12, "rest: error:") == 0;
    }
    bool one_line_error() const {
        const size_t nl = err.find('\n');
        return !signaled && code > 0 && code < 128 && !err.empty() && (nl == std::string::npos || nl + 1 == err.size());
    }
};

inline std::string shell_quote(const std::string & s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

inline std::string slurp(const std::string & path) {
    std::ifstream     in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs `bin args` (args already shell-quoted as needed) with stdout/stderr captured in files under dir, and
// stdin_text (if any) on its standard input.
inline cli_result run_cli(const std::string & bin, const std::string & args, const std::string & dir,
                          const std::string & stdin_text = "") {
    const std::string out = dir + "/stdout", err = dir + "/stderr";
    std::string       in  = "/dev/null";
    if (!stdin_text.empty()) {
        in = dir + "/stdin";
        std::ofstream(in, std::ios::binary) << stdin_text;
    }
    const std::string cmd = shell_quote(bin) + " " + args + " <" + shell_quote(in) + " >" + shell_quote(out) + " 2>" +
                            shell_quote(err);
    const int status = std::system(cmd.c_str());
    cli_result r;
    if (WIFEXITED(status)) {
        r.code = WEXITSTATUS(status);
        // sh reports a child killed by a signal as 128 + signal
        r.signaled = r.code >= 128;
    } else {
        r.signaled = true;
    }
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

// A test of the `rest` binary with a fresh scratch directory named after the test. Fixtures call open() first in
// SetUp (and return on a fatal failure).
class cli_test : public ::testing::Test {
  protected:
    void open(const std::string & prefix) {
        bin_ = rest_bin();
        ASSERT_TRUE(std::filesystem::exists(bin_)) << "rest binary not found at " << bin_ << " (build rest-cli)";
        dir_ = tmp_dir() + "/" + prefix + ::testing::UnitTest::GetInstance()->current_test_info()->name();
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
    }
    cli_result run(const std::string & args, const std::string & stdin_text = "") const {
        return run_cli(bin_, args, dir_, stdin_text);
    }

    std::string bin_, dir_;
};

}  // namespace rest_test
