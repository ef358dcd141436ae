#include "rest/index-builder.h"

#include "bigram-scan.h"
#include "index-file.h"
#include "index-format.h"
#include "suffix-sort.h"

#include <xxhash.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace rest {

namespace fmt = index_format;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct xxh3_stream {
    XXH3_state_t * st = XXH3_createState();
    xxh3_stream() {
        if (!st) {
            throw std::bad_alloc();
        }
        XXH3_64bits_reset(st);
    }
    ~xxh3_stream() { XXH3_freeState(st); }
    void          update(const void * p, std::size_t n) { XXH3_64bits_update(st, p, n); }
    std::uint64_t digest() const { return XXH3_64bits_digest(st); }
};

}  // namespace

struct index_builder::impl {
    atomic_file_writer   out;
    tokenizer_identity   tok;
    index_builder_params params;
    int                  sort_width  = 2;
    int                  token_width = 2;
    std::uint64_t        cap         = 0;  // tokens per shard, separators included
    anon_buffer          text;             // current shard, sort_width big-endian bytes per token
    std::uint64_t        n_text      = 0;  // tokens in the current shard, separators included
    std::uint64_t        shard_docs  = 0;
    std::vector<fmt::shard_entry> shards;
    std::uint64_t        n_documents = 0;
    std::uint64_t        n_tokens    = 0;
    double               t_sort      = 0;
    double               t_sort_cpu  = 0;
    double               t_write     = 0;
    bool                 finished    = false;

    impl(const std::string & path, const tokenizer_identity & t, const index_builder_params & p) :
        out(path), tok(t), params(p) {
        if (tok.n_vocab <= 0) {
            throw std::invalid_argument("index_builder: n_vocab must be positive");
        }
        sort_width  = sort_width_for(tok.n_vocab);
        token_width = token_width_for(tok.n_vocab);
        cap         = max_shard_tokens(sort_width);
        if (params.n_shard_tokens_max > 0) {
            cap = std::min(cap, std::max<std::uint64_t>(params.n_shard_tokens_max, 2));
        }
        // Reserve the header page; it is written last.
        std::vector<char> zeros(fmt::k_header_bytes, 0);
        out.write(zeros.data(), zeros.size());
        if (!params.base.empty()) {
            copy_shards_of(params.base);
        }
    }

    // Append: the base's shards copied unchanged (their checksums still hold) at new offsets, each section checked
    // against its checksum on the way, so nothing corrupt is copied. Everything is read from one mapping whose own
    // header and table are checked here: datastore::open (for its one-line errors) maps the path separately, and
    // another file may be renamed over it in between. The base stays as it was until finish() renames the new file
    // over it; readers that have it open keep their inode.
    void copy_shards_of(const std::string & base) {
        const file_mapping map(base);
        const auto ds = datastore::open(base, tok.fingerprint, tok.description, datastore::access::one_pass);
        if (ds->info().n_vocab != tok.n_vocab || ds->info().token_width != token_width) {
            throw user_error("index '" + base + "' has a " + std::to_string(ds->info().n_vocab) +
                             "-token vocabulary, the tokenizer " + std::to_string(tok.n_vocab));
        }
        const auto changed = [&base](const std::string & what) {
            throw user_error("index '" + base + "' changed while being appended to, or is corrupt (" + what + ")");
        };
        const auto in_map = [&map](std::uint64_t off, std::uint64_t bytes) {
            return off <= map.size() && bytes <= map.size() - off;
        };
        fmt::file_header hd;
        if (map.size() < fmt::k_header_bytes) changed("header");
        std::memcpy(&hd, map.data(), sizeof(hd));
        if (XXH3_64bits(&hd, offsetof(fmt::file_header, header_checksum)) != hd.header_checksum ||
            hd.file_bytes != map.size() || hd.tokenizer_fingerprint != tok.fingerprint || hd.n_vocab != tok.n_vocab ||
            hd.version == 0 || hd.version > fmt::k_version ||
            !in_map(hd.table_offset, std::uint64_t(hd.n_shards) * fmt::shard_entry_bytes(hd.version))) {
            changed("header");
        }
        const std::uint64_t table_bytes = std::uint64_t(hd.n_shards) * fmt::shard_entry_bytes(hd.version);
        if (XXH3_64bits(map.data() + hd.table_offset, table_bytes) != hd.table_checksum) {
            changed("shard table");
        }
        std::vector<fmt::shard_entry> table =
            fmt::decode_shard_table(map.data() + hd.table_offset, hd.version, hd.n_shards);
        const bool whole = params.base_shards >= table.size();
        table.resize(std::min(table.size(), params.base_shards));
        const std::uint64_t bucket_bytes = fmt::n_buckets_for(tok.n_vocab) * 4;
        const auto copy = [&](const char * what, std::uint64_t off, std::uint64_t bytes, std::uint64_t sum) {
            if (!in_map(off, bytes)) changed(std::string(what) + " out of the file");
            const std::uint64_t at = out.size();
            if (copy_section(map.data() + off, bytes) != sum) changed(std::string(what) + " checksum");
            return at;
        };
        for (fmt::shard_entry e : table) {
            if (e.n_text > UINT32_MAX || e.n_sa > e.n_text) changed("shard sizes");
            out.pad_to(fmt::k_section_align);
            e.text_offset = copy("text", e.text_offset, e.n_text * token_width, e.text_checksum);
            out.pad_to(fmt::k_section_align);
            e.sa_offset = copy("suffix array", e.sa_offset, e.n_sa * 4, e.sa_checksum);
            out.pad_to(fmt::k_section_align);
            e.bucket_offset = copy("first-token table", e.bucket_offset, bucket_bytes, e.bucket_checksum);
            if (e.n_bigrams > 0) {  // a version 1 shard has none: readers build it at open, as before
                if (e.n_bigrams > e.n_sa) changed("bigram table size");
                out.pad_to(fmt::k_section_align);
                const std::uint64_t bytes = fmt::bigram_bytes(bucket_bytes / 4, e.n_bigrams);
                e.bigram_offset           = copy("bigram table", e.bigram_offset, bytes, e.bigram_checksum);
            }
            if (e.n_samples > 0) {  // older shards have none: their searches run without, as before
                if (e.n_samples != fmt::n_samples_for(e.n_sa)) changed("sample table size");
                out.pad_to(fmt::k_section_align);
                e.sample_offset = copy("sample table", e.sample_offset, fmt::sample_bytes(e.n_samples, token_width),
                                       e.sample_checksum);
            }
            shards.push_back(e);
            progress(build_phase::write, shards.size(), table.size());
            if (!whole) {  // the header's totals count every shard
                n_documents += e.n_documents;
                n_tokens += e.n_sa;
            }
        }
        if (whole) {
            n_documents = hd.n_documents;
            n_tokens    = hd.n_tokens;
        }
    }

    // Appends bytes at the current end; returns their xxh3. Each chunk's pages leave this process once copied (p
    // points into a read-only file mapping): they stay in the page cache, but a 3.3 GB base index no longer shows,
    // and counts, as 3.3 GB of the append's resident memory. The address is rounded down to a page: sections are
    // 4096-aligned in the file, not necessarily to a larger page, and dropping a page already copied is harmless.
    std::uint64_t copy_section(const std::uint8_t * p, std::uint64_t bytes) {
        xxh3_stream         h;
        const std::uintptr_t page = static_cast<std::uintptr_t>(std::max(1L, ::sysconf(_SC_PAGESIZE)));
        for (std::uint64_t off = 0; off < bytes; off += 64u << 20) {
            const auto k = static_cast<std::size_t>(std::min<std::uint64_t>(64u << 20, bytes - off));
            h.update(p + off, k);
            out.write(p + off, k);
            const auto at = reinterpret_cast<std::uintptr_t>(p + off);
            const auto lo = at / page * page;
            (void) ::madvise(reinterpret_cast<void *>(lo), at + k - lo, MADV_DONTNEED);
        }
        return h.digest();
    }

    void progress(build_phase phase, std::uint64_t done, std::uint64_t total) const {
        if (params.on_progress) {
            params.on_progress({phase, done, total, n_tokens, shards.size()});
        }
    }

    void append(std::span<const token_id> tokens, bool separator_first) {
        if (!text.data()) {
            text = anon_buffer(cap * static_cast<std::uint64_t>(sort_width));
        }
        std::uint8_t * p = text.data() + n_text * sort_width;
        if (separator_first) {
            std::memset(p, 0xFF, sort_width);
            p += sort_width;
            ++n_text;
        }
        encode_sort_text(tokens, sort_width, p);
        n_text += tokens.size();
        n_tokens += tokens.size();
        ++shard_docs;
    }

    void add(std::span<const token_id> tokens) {
        for (const token_id t : tokens) {
            if (t < 0 || t >= tok.n_vocab) {
                throw std::invalid_argument("index_builder: token " + std::to_string(t) + " outside [0, " +
                                            std::to_string(tok.n_vocab) + ")");
            }
        }
        if (tokens.empty()) {
            return;
        }
        ++n_documents;
        while (!tokens.empty()) {
            const bool sep = n_text > 0;
            if (sep && n_text + 1 >= cap) {
                flush();
                continue;
            }
            const std::uint64_t room = cap - n_text - (sep ? 1 : 0);  // > 0
            if (sep && tokens.size() > room) {
                flush();  // keep the document whole when it fits in a fresh shard
                continue;
            }
            const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(tokens.size(), room));
            append(tokens.first(take), sep);
            tokens = tokens.subspan(take);
            if (!tokens.empty()) {
                flush();
            }
        }
    }

    // One token as the file stores it: token_width bytes, the width's largest value for a separator (k_doc_end).
    void put_token(std::uint8_t * at, token_id t) const {
        const std::uint32_t v = t == k_doc_end ? (token_width == 2 ? 0xFFFFu : 0xFFFFFFFFu) : static_cast<std::uint32_t>(t);
        if (token_width == 2) {
            const auto v16 = static_cast<std::uint16_t>(v);
            std::memcpy(at, &v16, 2);
        } else {
            std::memcpy(at, &v, 4);
        }
    }

    // The sample section's rows (index-format.h): the first tokens of every k_sample_step-th suffix, in the text's
    // width, a separator wherever the suffix's document or the text ends.
    std::vector<std::uint8_t> sample_rows(const std::int32_t * sa, std::uint64_t n_sa, std::uint64_t n, int sw) const {
        const std::uint64_t       rows = fmt::n_samples_for(n_sa);
        std::vector<std::uint8_t> out(static_cast<std::size_t>(fmt::sample_bytes(rows, token_width)));
        std::uint8_t *            at = out.data();
        for (std::uint64_t j = 0; j < rows; ++j) {
            const std::uint64_t pos = static_cast<std::uint64_t>(sa[j * fmt::k_sample_step]);
            bool                ended = false;
            for (std::uint64_t d = 0; d < fmt::k_sample_tokens; ++d, at += token_width) {
                const token_id t = ended || pos + d >= n ? k_doc_end : decode_sort_token(text.data() + (pos + d) * sw, sw);
                ended            = t == k_doc_end;
                put_token(at, t);
            }
        }
        return out;
    }

    // Suffix-sorts the current shard and appends its sections (text, suffix array, first-token and bigram tables,
    // sample rows).
    // Peak memory is here: the sort text plus the suffix sort's n + 1 ranks, types and buckets (suffix-sort.h).
    void flush() {
        if (n_text == 0) {
            return;
        }
        const std::uint64_t n  = n_text;
        const int           sw = sort_width;
        progress(build_phase::sort, shards.size(), 0);
#if defined(__GLIBC__)
        // Tokenizer threads leave freed batches in their malloc arenas; hand them back before the peak.
        malloc_trim(0);
#endif
        auto         t0   = std::chrono::steady_clock::now();
        const double cpu0 = thread_cpu_seconds();
        anon_buffer  work((n + 1) * sizeof(std::int32_t));
        auto *       sa   = reinterpret_cast<std::int32_t *>(work.data());
        const std::uint64_t n_sa = sort_suffixes(text.data(), n, sw, sa);
        t_sort += seconds_since(t0);
        t_sort_cpu += thread_cpu_seconds() - cpu0;

        t0 = std::chrono::steady_clock::now();
        fmt::shard_entry e{};
        e.n_text      = n;
        e.n_sa        = n_sa;
        e.n_documents = shard_docs;
        const std::uint64_t n_buckets = fmt::n_buckets_for(tok.n_vocab);
        const std::uint64_t total     = n * token_width + n_sa * 4 + n_buckets * 4;
        std::uint64_t       done  = 0;
        progress(build_phase::write, done, total);

        // Text: big-endian sort bytes to native tokens of token_width, in chunks.
        std::vector<std::uint8_t> chunk(1 << 20);
        const std::uint64_t       per_chunk = chunk.size() / token_width;
        std::vector<std::uint64_t> counts(static_cast<std::size_t>(n_buckets), 0);
        out.pad_to(fmt::k_section_align);
        e.text_offset = out.size();
        xxh3_stream h;
        for (std::uint64_t i = 0; i < n; i += per_chunk) {
            const std::uint64_t k = std::min(per_chunk, n - i);
            const std::uint8_t * src = text.data() + i * sw;
            for (std::uint64_t j = 0; j < k; ++j, src += sw) {
                const token_id t = decode_sort_token(src, sw);
                if (t != k_doc_end && n_buckets > 0) ++counts[static_cast<std::uint32_t>(t)];
                put_token(chunk.data() + j * token_width, t);
            }
            h.update(chunk.data(), k * token_width);
            out.write(chunk.data(), k * token_width);
            done += k * token_width;
            progress(build_phase::write, done, total);
        }
        e.text_checksum = h.digest();

        std::vector<std::uint32_t> buckets(counts.size());
        std::uint64_t              acc = 0;
        for (std::size_t t = 0; t < counts.size(); ++t) {
            buckets[t] = static_cast<std::uint32_t>(acc);
            acc += counts[t];
        }
        // The bigram table, while the sort text is still here: a reader then has it from its first lookup
        // instead of building it on a background thread after open (seconds per 100M tokens).
        bigram_table bigrams;
        if (!buckets.empty()) {
            const auto key_after = [&](std::uint64_t pos) -> std::uint64_t {  // as index_shard::key_at(pos + 1)
                if (pos + 1 >= n) return 0;
                const token_id t = decode_sort_token(text.data() + (pos + 1) * sw, sw);
                return t == k_doc_end ? UINT64_MAX : std::uint64_t(t) + 1;
            };
            const auto prefetch_after = [&](std::uint64_t pos) {
                if (pos + 1 < n) __builtin_prefetch(text.data() + (pos + 1) * sw);
            };
            scan_bigrams(buckets.data(), buckets.size(), [sa](std::uint64_t r) { return std::uint64_t(sa[r]); },
                         key_after, prefetch_after, bigram_cap(n_sa, buckets.size()), {}, bigrams);
        }
        const std::vector<std::uint8_t> samples = sample_rows(sa, n_sa, n, sw);
        text.release();

        out.pad_to(fmt::k_section_align);
        e.sa_offset = out.size();
        xxh3_stream hs;
        const std::uint64_t sa_bytes = n_sa * 4;  // int32 ranks < 2^31: the same bits as u32
        for (std::uint64_t off = 0; off < sa_bytes; off += 64u << 20) {
            const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(64u << 20, sa_bytes - off));
            hs.update(work.data() + off, k);
            out.write(work.data() + off, k);
            done += k;
            progress(build_phase::write, done, total);
        }
        e.sa_checksum = hs.digest();
        work.release();

        out.pad_to(fmt::k_section_align);
        e.bucket_offset   = out.size();
        e.bucket_checksum = XXH3_64bits(buckets.data(), buckets.size() * 4);
        out.write(buckets.data(), buckets.size() * 4);
        if (!bigrams.key.empty()) {
            out.pad_to(fmt::k_section_align);
            e.bigram_offset = out.size();
            e.n_bigrams     = bigrams.key.size();
            xxh3_stream hb;
            for (const auto * v : {&bigrams.first, &bigrams.key, &bigrams.start}) {
                hb.update(v->data(), v->size() * 4);
                out.write(v->data(), v->size() * 4);
            }
            e.bigram_checksum = hb.digest();
        }
        if (!samples.empty()) {
            out.pad_to(fmt::k_section_align);
            e.sample_offset   = out.size();
            e.n_samples       = fmt::n_samples_for(n_sa);
            e.sample_checksum = XXH3_64bits(samples.data(), samples.size());
            out.write(samples.data(), samples.size());
        }
        progress(build_phase::write, total, total);
        t_write += seconds_since(t0);

        shards.push_back(e);
        n_text     = 0;
        shard_docs = 0;
    }

    datastore_info finish() {
        if (finished) {
            throw std::logic_error("index_builder::finish called twice");
        }
        flush();
        if (n_tokens == 0) {
            throw user_error("empty corpus: no tokens to index");
        }
        const auto t0 = std::chrono::steady_clock::now();
        out.pad_to(8);
        fmt::file_header hd;
        std::memset(&hd, 0, sizeof(hd));
        std::memcpy(hd.magic, fmt::k_magic, sizeof(hd.magic));
        hd.version               = fmt::k_version;
        hd.header_bytes          = static_cast<std::uint32_t>(fmt::k_header_bytes);
        hd.tokenizer_fingerprint = tok.fingerprint;
        hd.token_width           = static_cast<std::uint32_t>(token_width);
        hd.n_shards              = static_cast<std::uint32_t>(shards.size());
        hd.n_vocab               = tok.n_vocab;
        hd.n_documents           = n_documents;
        hd.n_tokens              = n_tokens;
        hd.table_offset          = out.size();
        hd.table_checksum        = XXH3_64bits(shards.data(), shards.size() * sizeof(fmt::shard_entry));
        std::snprintf(hd.tokenizer_description, sizeof(hd.tokenizer_description), "%s", tok.description.c_str());
        out.write(shards.data(), shards.size() * sizeof(fmt::shard_entry));
        hd.file_bytes      = out.size();
        hd.header_checksum = XXH3_64bits(&hd, offsetof(fmt::file_header, header_checksum));
        out.pwrite_at(0, &hd, sizeof(hd));
        out.commit();
        finished = true;
        t_write += seconds_since(t0);

        datastore_info info;
        info.format_version        = fmt::k_version;
        info.tokenizer_fingerprint = tok.fingerprint;
        info.tokenizer_description = hd.tokenizer_description;
        info.token_width           = token_width;
        info.n_documents           = n_documents;
        info.n_tokens              = n_tokens;
        info.n_bytes               = hd.file_bytes;
        info.n_shards              = shards.size();
        return info;
    }
};

index_builder::index_builder(const std::string & path, const tokenizer_identity & tok,
                             const index_builder_params & params) :
    impl_(std::make_unique<impl>(path, tok, params)) {}

index_builder::~index_builder() = default;

void index_builder::add_document(std::span<const token_id> tokens) {
    impl_->add(tokens);
}

datastore_info index_builder::finish() {
    return impl_->finish();
}

const std::string & index_builder::temp_path() const {
    return impl_->out.temp_path();
}

double index_builder::t_sort_s() const {
    return impl_->t_sort;
}

double index_builder::t_sort_cpu_s() const {
    return impl_->t_sort_cpu;
}

double index_builder::t_write_s() const {
    return impl_->t_write;
}

void write_datastore(const std::string & path, std::span<const std::vector<token_id>> documents,
                     const tokenizer_identity & tok, const index_builder_params & params) {
    index_builder b(path, tok, params);
    for (const auto & d : documents) {
        b.add_document(d);
    }
    b.finish();
}

namespace {

// Adds a shard's documents, in order, to b.
void add_documents_of(const index_shard & s, index_builder & b) {
    std::vector<token_id> doc;
    for (std::uint64_t pos = 0; pos <= s.n_tokens(); ++pos) {
        const token_id t = s.token_at(pos);  // k_doc_end at a separator and past the end
        if (t != k_doc_end) {
            doc.push_back(t);
        } else if (!doc.empty()) {
            b.add_document(doc);
            doc.clear();
        }
    }
}

}  // namespace

datastore_info compact_datastore(const std::string & path, const index_builder_params & params) {
    const auto ds = datastore::open(path, 0, "", datastore::access::one_pass);
    ds->verify();  // the documents are read back from it
    const auto & in = ds->info();
    index_builder_params p = params;
    p.base.clear();
    index_builder b(path, {in.tokenizer_fingerprint, in.tokenizer_description, (std::int32_t) in.n_vocab}, p);
    for (const index_shard & s : ds->shards()) add_documents_of(s, b);
    return b.finish();
}

datastore_info append_merging(const std::string & path, std::span<const std::vector<token_id>> documents,
                              const tokenizer_identity & tok, const index_builder_params & params) {
    index_builder_params p = params;
    p.base.clear();
    std::unique_ptr<datastore> ds;  // the store appended to, if there is one
    std::size_t                keep = 0;
    if (std::error_code ec; std::filesystem::exists(path, ec)) {
        ds = datastore::open(path, tok.fingerprint, tok.description, datastore::access::one_pass);
        ds->verify();  // the merged shards' documents are read back from it (the copied ones are checked as copied)
        std::uint64_t merged = 0;
        for (const auto & d : documents) merged += d.size();
        keep = ds->shards().size();
        while (keep > 0 && ds->shards()[keep - 1].n_tokens() <= 2 * merged) merged += ds->shards()[--keep].n_tokens();
        p.base        = path;
        p.base_shards = keep;
    }
    index_builder b(path, tok, p);
    for (std::size_t i = keep; ds && i < ds->shards().size(); ++i) add_documents_of(ds->shards()[i], b);
    for (const auto & d : documents) b.add_document(d);
    return b.finish();
}

void write_datastore(const std::string & path, std::span<const std::vector<token_id>> documents,
                     const tokenizer_identity & tok, int /*n_threads*/) {
    write_datastore(path, documents, tok, index_builder_params{});
}

}  // namespace rest
