// Suffix sorting (SA-IS over big-endian token texts) against a naive sort of suffix indices.
#include "index/suffix-sort.h"
#include "ref/ref-index.h"

#include <gtest/gtest.h>

#include <random>

namespace {

using rest::token_id;

// Separator-free random tokens in [0, alphabet) with a separator at each position with probability p_sep.
std::vector<token_id> random_text(std::size_t n, token_id alphabet, double p_sep, std::uint32_t seed,
                                  token_id offset = 0) {
    std::mt19937                            rng(seed);
    std::uniform_int_distribution<token_id> tok(0, alphabet - 1);
    std::bernoulli_distribution             sep(p_sep);
    std::vector<token_id>                   t(n);
    for (auto & x : t) {
        x = sep(rng) ? rest::k_doc_end : tok(rng) + offset;
    }
    return t;
}

void expect_same_sa(const std::vector<token_id> & text, int sort_width) {
    const std::vector<std::uint32_t> got  = rest::suffix_array(text, sort_width);
    const std::vector<std::uint32_t> want = rest_ref::suffix_array(text);
    ASSERT_EQ(got.size(), want.size()) << "n=" << text.size() << " sort_width=" << sort_width;
    for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "first difference at rank " << i << " (n=" << text.size()
                                   << ", sort_width=" << sort_width << ")";
    }
}

TEST(index_sort, widths) {
    EXPECT_EQ(rest::sort_width_for(512), 2);
    EXPECT_EQ(rest::sort_width_for(65534), 2);
    EXPECT_EQ(rest::sort_width_for(65535), 3);
    EXPECT_EQ(rest::sort_width_for(151936), 3);
    EXPECT_EQ(rest::sort_width_for(1 << 24), 4);
    EXPECT_EQ(rest::token_width_for(32000), 2);
    EXPECT_EQ(rest::token_width_for(65535), 4);
    EXPECT_EQ(rest::token_width_for(151936), 4);
}

TEST(index_sort, edge_cases) {
    for (int w : {2, 3, 4}) {
        expect_same_sa({}, w);
        expect_same_sa({7}, w);
        expect_same_sa({rest::k_doc_end}, w);
        expect_same_sa({0, 0, 0, 0, 0, 0, 0, 0}, w);
        expect_same_sa(std::vector<token_id>(1000, 3), w);
        expect_same_sa({1, rest::k_doc_end, 1, rest::k_doc_end, 1}, w);
        expect_same_sa({rest::k_doc_end, rest::k_doc_end, 2, 1, rest::k_doc_end}, w);
        std::vector<token_id> abc;
        for (int i = 0; i < 999; ++i) {
            abc.push_back(i % 3);
        }
        expect_same_sa(abc, w);
    }
    // Largest token ids each width can hold (one below the all-0xFF separator).
    expect_same_sa({65534, 0, 65534, 65533, 65534, rest::k_doc_end, 65534}, 2);
    expect_same_sa({0xFFFFFE, 0, 0xFFFFFE, 0xFFFF, 0xFFFFFE, rest::k_doc_end, 0xFFFFFE}, 3);
    expect_same_sa({INT32_MAX, 0, INT32_MAX, 0x00FFFFFF, INT32_MAX, rest::k_doc_end, 0x01000000}, 4);
}

// Tokens whose bytes agree in the high byte and differ in the low one (and vice versa) catch a wrong byte order.
TEST(index_sort, byte_order) {
    for (int w : {2, 3, 4}) {
        expect_same_sa({0x0100, 0x00FF, 0x0101, 0x0001, 0x0100, 0x00FF, 0x0200}, w);
    }
}

TEST(index_sort, random_small_alphabets_and_sizes) {
    std::uint32_t seed = 1;
    for (token_id alphabet : {2, 3, 50, 50000}) {
        for (std::size_t n : {1u, 2u, 3u, 5u, 17u, 100u, 1000u, 20000u}) {
            for (double p_sep : {0.0, 0.01, 0.2}) {
                expect_same_sa(random_text(n, alphabet, p_sep, seed++), 2);
                if (n <= 1000) {
                    expect_same_sa(random_text(n, alphabet, p_sep, seed++, 65000), 3);
                    expect_same_sa(random_text(n, alphabet, p_sep, seed++, 0x7FFF0000), 4);
                }
            }
        }
    }
}

// Long repeats: random blocks copied many times, with and without separators between copies.
TEST(index_sort, heavy_repeats) {
    std::mt19937 rng(42);
    for (int trial = 0; trial < 6; ++trial) {
        std::vector<token_id> block = random_text(1 + rng() % 200, 1 + rng() % 20, 0.0, rng());
        std::vector<token_id> text;
        const int             copies = 2 + rng() % 40;
        for (int c = 0; c < copies; ++c) {
            text.insert(text.end(), block.begin(), block.end());
            if (trial % 2 == 1) {
                text.push_back(rest::k_doc_end);
            }
            if (rng() % 3 == 0) {
                text.push_back(static_cast<token_id>(rng() % 20));  // an occasional mutation
            }
        }
        for (int w : {2, 3, 4}) {
            expect_same_sa(text, w);
        }
    }
}

TEST(index_sort, one_million_tokens) {
    expect_same_sa(random_text(1000000, 4, 0.001, 7), 2);
}

TEST(index_sort, rejects_too_long_shards) {
    std::int32_t  work = 0;
    std::uint8_t  text = 0;
    EXPECT_THROW(rest::sort_suffixes(&text, rest::max_shard_tokens(2) + 1, 2, &work), std::invalid_argument);
}

}  // namespace
