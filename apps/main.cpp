#include "commands.h"
#include "rest/types.h"

#include <cstdio>
#include <exception>
#include <new>

int main(int argc, char ** argv) {
    CLI::App app{"rest.cpp: lossless retrieval-based speculative decoding (REST) for llama.cpp models", "rest"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "rest.cpp 0.1.0");
    add_generate_command(app);
    add_index_command(app);
    add_bench_command(app);
    add_serve_command(app);
    add_fixture_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        return app.exit(e);
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
