#include "commands.h"
#include "llama-args.h"
#include "rest/types.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

// The model and the indexes are memory-mapped: a file truncated or rewritten in place while mapped (`cp new.idx
// in-use.idx`) makes the next read of a lost page SIGBUS, which killed a generation with "Bus error". One line
// instead, that says how to replace such a file (rest's own writers rename a new file over the old one).
extern "C" void on_sigbus(int) {
    static const char msg[] = "rest: error: a memory-mapped file (the model or an index) was truncated or rewritten "
                              "while in use; replace such files by renaming a new file over them\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);  // async-signal-safe
    (void) ignored;
    ::_exit(1);
}

// "rest genrate" or "rest index foo": CLI11 says only that a subcommand is required; this names the word and the
// commands there are. "" where the command line named its commands.
std::string unknown_command(const CLI::App & app) {
    const CLI::App * at   = &app;
    std::string      path = "rest";
    while (!at->get_subcommands().empty()) {  // down the commands the line named (one at each level)
        at = at->get_subcommands().front();
        path += " " + at->get_name();
    }
    if (at->get_require_subcommand_min() == 0) return "";
    const std::vector<std::string> left = at->remaining();
    const auto word = std::find_if(left.begin(), left.end(), [](const std::string & a) { return !a.starts_with("-"); });
    if (word == left.end()) return "";
    std::string names;
    for (const CLI::App * sub : at->get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
    return "'" + *word + "' is not a command of '" + path + "' (commands: " + names + ")";
}

}  // namespace

int main(int argc, char ** argv) {
    std::signal(SIGBUS, on_sigbus);
    CLI::App app{"rest.cpp: lossless retrieval-based speculative decoding (REST) for llama.cpp models", "rest"};
    app.require_subcommand(1);
    // A repeated single-value option takes its last value, as llama.cpp's do (a script's default, then the user's
    // own); options that take a list (--index, files) keep every value.
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.set_version_flag("--version", "rest.cpp 0.1.0");
    add_generate_command(app);
    add_index_command(app);
    add_bench_command(app);
    add_serve_command(app);
    add_fixture_command(app);
    try {
        // llama.cpp's -ngl, -np, -fa, ... become rest's long names first (llama-args.h says why).
        const std::vector<std::string> args = rewrite_llama_args(std::vector<std::string>(argv + 1, argv + argc));
        std::vector<const char *>      cargv = {argv[0]};
        for (const auto & a : args) cargv.push_back(a.c_str());
        app.parse((int) cargv.size(), cargv.data());
        // Output that did not reach its file (a full disk, /dev/full) is an error, not 0. A failed write's errno
        // is long gone by now (glibc drops the buffer, so this flush succeeds): its own only if this flush fails.
        errno = 0;
        if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
            std::fprintf(stderr, "rest: error: writing the output failed%s%s\n", errno ? ": " : "",
                         errno ? std::strerror(errno) : "");
            return 1;
        }
    } catch (const CLI::ParseError & e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
        if (const std::string unknown = unknown_command(app); !unknown.empty()) {
            std::fprintf(stderr, "rest: error: %s (see --help)\n", unknown.c_str());
            return e.get_exit_code();
        }
        // A bad argument is one line like every other error (CLI11's own report adds "Run with --help ...").
        std::fprintf(stderr, "rest: error: %s (see --help)\n", e.what());
        return e.get_exit_code();
    } catch (const rest::user_error & e) {
        std::fprintf(stderr, "rest: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc &) {
        std::fprintf(stderr, "rest: error: out of memory\n");
        return 1;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "rest: error: %s\n", e.what());
        return 2;
    }
    return 0;
}
