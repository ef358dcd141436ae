#include "rest/history-store.h"

#include "history-file.h"

#include "index/suffix-sort.h"

#include <xxhash.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace rest {

namespace {

using history_file::k_magic;
using history_file::k_version;
using file_header = history_file::header;
constexpr std::uint32_t k_separator = 0xFFFFFFFFu;

using segment_ptr = std::shared_ptr<const history_segment>;
using document    = std::vector<token_id>;

// One suffix sort over the documents, in order.
segment_ptr make_segment(std::span<const document> docs) {
    auto          seg   = std::make_shared<history_segment>();
    std::uint64_t n     = 0;
    token_id      t_max = 0;
    for (const document & d : docs) {
        n += d.size() + 1;
        for (const token_id t : d) {
            t_max = std::max(t_max, t);
        }
    }
    std::vector<token_id> tokens;
    tokens.reserve(n);
    seg->text.reserve(n);
    for (const document & d : docs) {
        tokens.insert(tokens.end(), d.begin(), d.end());
        tokens.push_back(k_doc_end);
        for (const token_id t : d) {
            seg->text.push_back(static_cast<std::uint32_t>(t));
        }
        seg->text.push_back(k_separator);
        seg->n_tokens += d.size();
        seg->n_documents++;
    }
    seg->sa    = suffix_array(tokens, sort_width_for(static_cast<std::int64_t>(t_max) + 1));
    seg->shard = index_shard(seg->text.data(), seg->text.size(), seg->sa.data(), seg->sa.size(), 4);
    return seg;
}

std::vector<document> documents_of(std::span<const segment_ptr> segs) {
    std::vector<document> docs;
    for (const segment_ptr & s : segs) {
        std::vector<document> d = s->documents();
        std::move(d.begin(), d.end(), std::back_inserter(docs));
    }
    return docs;
}

[[noreturn]] void fail(const std::string & path, const std::string & what) {
    throw user_error("history store " + path + ": " + what);
}

}  // namespace

std::vector<std::vector<token_id>> history_segment::documents() const {
    std::vector<std::vector<token_id>> docs(1);
    for (const std::uint32_t v : text) {
        if (v == k_separator) {
            docs.emplace_back();
        } else {
            docs.back().push_back(static_cast<token_id>(v));
        }
    }
    docs.pop_back();  // the text ends with a separator
    return docs;
}

history_store::history_store(history_store_params params) : params_(params) {
    params_.n_tokens_max = std::max<std::uint64_t>(params_.n_tokens_max, 1);
    publish({});
}

history_store::~history_store() = default;

void history_store::publish(std::vector<segment_ptr> segments) {
    auto snap = std::make_shared<history_snapshot>();
    for (const segment_ptr & s : segments) {
        snap->shards.push_back(s->shard);
        snap->n_tokens += s->n_tokens;
        snap->n_documents += s->n_documents;
    }
    snap->segments = std::move(segments);
    std::lock_guard<std::mutex> lock(snap_mutex_);
    snap->version = snap_ ? snap_->version + 1 : 0;
    snap_         = std::move(snap);
}

std::shared_ptr<const history_snapshot> history_store::snapshot() const {
    std::lock_guard<std::mutex> lock(snap_mutex_);
    return snap_;
}

std::uint64_t history_store::n_tokens() const {
    return snapshot()->n_tokens;
}

std::uint64_t history_store::n_documents() const {
    return snapshot()->n_documents;
}

void history_store::clear() {
    std::lock_guard<std::mutex> lock(write_mutex_);
    publish({});
}

void history_store::add(std::span<const token_id> doc) {
    for (const token_id t : doc) {
        if (t < 0) {
            throw std::invalid_argument("history_store::add: negative token " + std::to_string(t));
        }
    }
    const std::uint64_t cap = params_.n_tokens_max;
    if (doc.empty() || cap == 0) {
        return;  // a store of capacity 0 is off
    }
    const std::uint64_t seg_max = std::max<std::uint64_t>(1, cap / 4);
    if (doc.size() > cap) {
        doc = doc.last(cap);
    }
    std::lock_guard<std::mutex> lock(write_mutex_);
    std::vector<segment_ptr>    segs = snapshot()->segments;
    const document              d(doc.begin(), doc.end());
    segs.push_back(make_segment({&d, 1}));
    // Merge the newest two while the newer is at least half the older: segment sizes then at least double from
    // new to old, so there are O(log) of them and each token is re-sorted O(log) times.
    while (segs.size() >= 2) {
        const history_segment & older = *segs[segs.size() - 2];
        const history_segment & newer = *segs.back();
        if (newer.n_tokens * 2 < older.n_tokens || older.n_tokens + newer.n_tokens > seg_max) {
            break;
        }
        const std::vector<document> docs = documents_of({segs.end() - 2, segs.end()});
        segs.pop_back();
        segs.back() = make_segment(docs);
    }
    std::uint64_t total = 0;
    for (const segment_ptr & s : segs) {
        total += s->n_tokens;
    }
    std::size_t drop = 0;
    while (total > cap && drop + 1 < segs.size()) {
        total -= segs[drop++]->n_tokens;
    }
    segs.erase(segs.begin(), segs.begin() + static_cast<std::ptrdiff_t>(drop));
    publish(std::move(segs));
}

void history_store::save(const std::string & path) const {
    const auto                 snap = snapshot();
    std::vector<std::uint32_t> payload;
    payload.reserve(snap->n_tokens + snap->n_documents);
    for (const segment_ptr & s : snap->segments) {
        for (const document & d : s->documents()) {
            payload.push_back(static_cast<std::uint32_t>(d.size()));
            for (const token_id t : d) {
                payload.push_back(static_cast<std::uint32_t>(t));
            }
        }
    }
    file_header hd{};
    std::memcpy(hd.magic, k_magic, sizeof(k_magic));
    hd.version          = k_version;
    hd.header_bytes     = sizeof(file_header);
    hd.fingerprint      = params_.fingerprint;
    hd.n_documents      = snap->n_documents;
    hd.n_tokens         = snap->n_tokens;
    hd.payload_bytes    = payload.size() * sizeof(std::uint32_t);
    hd.payload_checksum = XXH3_64bits(payload.data(), hd.payload_bytes);
    hd.header_checksum  = XXH3_64bits(&hd, offsetof(file_header, header_checksum));

    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    std::FILE *       f   = std::fopen(tmp.c_str(), "wb");
    if (!f) {
        fail(tmp, std::string("cannot create: ") + std::strerror(errno));
    }
    const bool ok = std::fwrite(&hd, sizeof(hd), 1, f) == 1 &&
                    (payload.empty() || std::fwrite(payload.data(), hd.payload_bytes, 1, f) == 1) &&
                    std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    const int err = errno;
    std::fclose(f);
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = ok ? errno : err;
        std::remove(tmp.c_str());
        fail(path, std::string("cannot write: ") + std::strerror(e));
    }
}

void history_store::load(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        fail(path, "cannot open (missing or unreadable)");
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    file_header             hd{};
    if (bytes.size() >= sizeof(k_magic) && std::memcmp(bytes.data(), k_magic, sizeof(k_magic)) != 0) {
        fail(path, "is not a history store (bad magic at offset 0, expected 'RESTHIST')");
    }
    if (bytes.size() < sizeof(file_header)) {
        fail(path, "is truncated: " + std::to_string(bytes.size()) + " bytes, shorter than its " +
                       std::to_string(sizeof(file_header)) + "-byte header");
    }
    std::memcpy(&hd, bytes.data(), sizeof(hd));
    if (hd.version > k_version || hd.version == 0) {
        fail(path, "has format version " + std::to_string(hd.version) + " at offset 8, this rest.cpp reads " +
                       std::to_string(k_version));
    }
    if (XXH3_64bits(&hd, offsetof(file_header, header_checksum)) != hd.header_checksum ||
        hd.header_bytes != sizeof(file_header)) {
        fail(path, "has a corrupt header (checksum mismatch)");
    }
    if (bytes.size() != sizeof(file_header) + hd.payload_bytes) {
        fail(path, "is " + std::to_string(bytes.size()) + " bytes, the header says " +
                       std::to_string(sizeof(file_header) + hd.payload_bytes) + " (truncated or trailing data)");
    }
    const char * payload = bytes.data() + sizeof(file_header);
    if (XXH3_64bits(payload, hd.payload_bytes) != hd.payload_checksum) {
        fail(path, "payload checksum mismatch (corrupt file)");
    }
    if (params_.fingerprint != 0 && hd.fingerprint != 0 && params_.fingerprint != hd.fingerprint) {
        fail(path, "was saved with tokenizer fingerprint " + std::to_string(hd.fingerprint) +
                       ", this store expects " + std::to_string(params_.fingerprint));
    }
    std::vector<document> docs;
    std::uint64_t         off = 0, n_tokens = 0;
    const std::uint64_t   n_words = hd.payload_bytes / sizeof(std::uint32_t);
    auto                  word    = [&](std::uint64_t i) {
        std::uint32_t v;
        std::memcpy(&v, payload + i * sizeof(v), sizeof(v));
        return v;
    };
    while (off < n_words) {
        const std::uint64_t len = word(off++);
        if (len > n_words - off) {
            fail(path, "document " + std::to_string(docs.size()) + " at word " + std::to_string(off - 1) +
                           " runs past the end of the payload");
        }
        document d(len);
        for (std::uint64_t i = 0; i < len; ++i) {
            const std::uint32_t v = word(off + i);
            if (v > static_cast<std::uint32_t>(INT32_MAX)) {
                fail(path, "invalid token " + std::to_string(v) + " at word " + std::to_string(off + i));
            }
            d[i] = static_cast<token_id>(v);
        }
        off += len;
        n_tokens += len;
        if (!d.empty()) {
            docs.push_back(std::move(d));
        }
    }
    if (n_tokens != hd.n_tokens || hd.payload_bytes % sizeof(std::uint32_t) != 0) {
        fail(path, "holds " + std::to_string(n_tokens) + " tokens, the header says " + std::to_string(hd.n_tokens));
    }
    // Keep the newest documents that fit, then sort them in segments of at most a quarter of the bound.
    const std::uint64_t cap = params_.n_tokens_max, seg_max = std::max<std::uint64_t>(1, cap / 4);
    std::uint64_t       total = 0;
    std::size_t         first = docs.size();
    while (first > 0 && total + docs[first - 1].size() <= cap) {
        total += docs[--first].size();
    }
    if (first > 0 && total == 0) {  // the newest document alone is longer than the bound
        --first;
        docs[first].erase(docs[first].begin(), docs[first].end() - static_cast<std::ptrdiff_t>(cap));
    }
    std::vector<segment_ptr> segs;
    std::size_t              begin = first;
    std::uint64_t            acc   = 0;
    for (std::size_t i = first; i <= docs.size(); ++i) {
        const bool flush = i == docs.size() || (acc > 0 && acc + docs[i].size() > seg_max);
        if (flush && i > begin) {
            segs.push_back(make_segment({docs.begin() + static_cast<std::ptrdiff_t>(begin),
                                         docs.begin() + static_cast<std::ptrdiff_t>(i)}));
            begin = i;
            acc   = 0;
        }
        if (i < docs.size()) {
            acc += docs[i].size();
        }
    }
    std::lock_guard<std::mutex> lock(write_mutex_);
    publish(std::move(segs));
}

}  // namespace rest
