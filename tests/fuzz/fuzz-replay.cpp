// CTest's replay of the index fuzzer (fuzz-index.cpp): small valid indexes as seeds (u16 and u32 tokens, one and
// several documents), each section of each seed overwritten by deterministic garbage, truncations, and every file
// under tests/fuzz/crashers (inputs the long libFuzzer runs found). A crash fails the test. With --write-seeds DIR
// it only writes the seeds, as scripts/fuzz-index.sh's starting corpus.
#include "../index-version1.h"
#include "index/index-format.h"
#include "rest/index-builder.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t * data, std::size_t size);
extern std::size_t rest_fuzz_index_opened;

namespace {

namespace fs  = std::filesystem;
namespace fmt = rest::index_format;

std::vector<std::uint8_t> read_file(const fs::path & p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Seeds: (vocabulary, documents) pairs that give both token widths, with and without first-token tables, and
// repeated n-grams to draft from, some with ranges long enough for the sample rows; each also as format version 1
// wrote it.
std::vector<fs::path> write_seeds(const fs::path & dir) {
    fs::create_directories(dir);
    std::vector<fs::path> out;
    std::mt19937 rng(1);
    int k = 0;
    // u16 text; u32 text with a first-token table; u32 text without one (vocabularies past 2^22).
    for (const std::int32_t n_vocab : {50, 70000, (1 << 22) + 1}) {
        for (const int n_docs : {1, 3, 40}) {  // 40: first tokens with 256+ suffixes, searched by the sample rows
            std::vector<std::vector<rest::token_id>> docs(n_docs);
            for (auto & d : docs) {
                for (int i = 0; i < 60; ++i) d.push_back((rest::token_id) (rng() % 7 + (i % 5 == 0 ? n_vocab - 8 : 1)));
            }
            const fs::path p = dir / ("seed-" + std::to_string(k++) + ".idx");
            rest::write_datastore(p.string(), docs, {0x1234u + (std::uint64_t) n_vocab, "fuzz seed", n_vocab});
            out.push_back(p);
            // The same as format version 1 wrote it: no bigram tables, which lookups then build from the suffix
            // array (the build's own bounds get fuzzed too).
            const fs::path v1 = dir / ("seed-" + std::to_string(k++) + "-v1.idx");
            rest_test::write_version1_copy(p.string(), v1.string());
            out.push_back(v1);
        }
    }
    return out;
}

// Variants of one seed: each section's bytes replaced (random, ones, zeros), a random 1/8 of its bytes flipped, and
// the file cut at a few places.
std::vector<std::vector<std::uint8_t>> variants_of(const std::vector<std::uint8_t> & f, std::uint32_t seed) {
    std::vector<std::vector<std::uint8_t>> out;
    fmt::file_header hd;
    if (f.size() < sizeof hd) return out;
    std::memcpy(&hd, f.data(), sizeof hd);
    std::mt19937 rng(seed);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> sections;  // (offset, bytes)
    const std::uint64_t entry_bytes = fmt::shard_entry_bytes(hd.version);
    if (hd.table_offset > f.size() || hd.n_shards > (f.size() - hd.table_offset) / entry_bytes) return out;
    for (const fmt::shard_entry & e : fmt::decode_shard_table(f.data() + hd.table_offset, hd.version, hd.n_shards)) {
        sections.push_back({e.text_offset, e.n_text * hd.token_width});
        sections.push_back({e.sa_offset, e.n_sa * 4});
        sections.push_back({e.bucket_offset, fmt::n_buckets_for(hd.n_vocab) * 4});
        if (e.n_bigrams > 0) {
            sections.push_back({e.bigram_offset, fmt::bigram_bytes(fmt::n_buckets_for(hd.n_vocab), e.n_bigrams)});
        }
        if (e.n_samples > 0) sections.push_back({e.sample_offset, fmt::sample_bytes(e.n_samples, hd.token_width)});
    }
    for (const auto & [off, n] : sections) {
        for (int how = 0; how < 4; ++how) {
            std::vector<std::uint8_t> v = f;
            for (std::uint64_t b = off; b < off + n && b < v.size(); ++b) {
                v[b] = how == 0 ? (std::uint8_t) rng() : how == 1 ? 0xFF : how == 2 ? 0 : (rng() % 8 ? v[b] : (std::uint8_t) rng());
            }
            out.push_back(std::move(v));
        }
    }
    for (const std::size_t cut : {f.size() / 2, f.size() - 1, (std::size_t) 4096, (std::size_t) 100}) {
        out.emplace_back(f.begin(), f.begin() + (std::ptrdiff_t) std::min(cut, f.size()));
    }
    return out;
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc == 3 && std::string(argv[1]) == "--write-seeds") {
        for (const auto & p : write_seeds(argv[2])) std::printf("%s\n", p.c_str());
        return 0;
    }
    if (argc != 3) {
        std::fprintf(stderr, "usage: fuzz-replay WORK_DIR CRASHERS_DIR | --write-seeds DIR\n");
        return 2;
    }
    std::size_t n_inputs = 0;
    std::uint32_t seed = 0;
    for (const auto & p : write_seeds(fs::path(argv[1]) / "fuzz-seeds")) {
        const auto        f      = read_file(p);
        const std::size_t before = rest_fuzz_index_opened;
        LLVMFuzzerTestOneInput(f.data(), f.size());
        ++n_inputs;
        if (rest_fuzz_index_opened != before + 1) {
            std::fprintf(stderr, "fuzz replay: the valid seed %s did not open\n", p.c_str());
            return 1;
        }
        for (const auto & v : variants_of(f, ++seed)) {
            LLVMFuzzerTestOneInput(v.data(), v.size());
            ++n_inputs;
        }
    }
    if (!fs::is_directory(argv[2])) {
        std::fprintf(stderr, "fuzz replay: no crashers directory %s\n", argv[2]);
        return 1;
    }
    {
        for (const auto & e : fs::directory_iterator(argv[2])) {
            if (!e.is_regular_file() || e.path().filename() == "README.md") continue;
            const auto f = read_file(e.path());
            LLVMFuzzerTestOneInput(f.data(), f.size());
            ++n_inputs;
        }
    }
    std::printf("fuzz replay: %zu inputs (%zu opened), no crash\n", n_inputs, rest_fuzz_index_opened);
    return 0;
}
