// POSIX file plumbing for datastores: an atomic writer, a read-only mapping and anonymous memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace rest {

// Writes `path` atomically: everything goes to a temp file in the same directory, which commit() fsyncs and renames
// over `path` (then fsyncs the directory). Destroying an uncommitted writer removes the temp file, so an interrupted
// or failed build never leaves anything under the final name.
class atomic_file_writer {
  public:
    explicit atomic_file_writer(const std::string & path);
    ~atomic_file_writer();
    atomic_file_writer(const atomic_file_writer &) = delete;
    atomic_file_writer & operator=(const atomic_file_writer &) = delete;

    void          write(const void * data, std::size_t n);              // appends
    void          pad_to(std::uint64_t alignment);                       // appends zeros
    void          pwrite_at(std::uint64_t offset, const void * data, std::size_t n);
    std::uint64_t size() const { return size_; }
    // Below this size a committed file keeps its pages in the page cache (commit() says why larger ones do not).
    static constexpr std::uint64_t k_drop_pages_min = 64ull << 20;
    void          commit(std::uint64_t drop_pages_min = k_drop_pages_min);

    const std::string & temp_path() const { return temp_path_; }

  private:
    std::string   path_;
    std::string   temp_path_;
    int           fd_   = -1;
    std::uint64_t size_ = 0;
    bool          committed_ = false;
};

// A whole file mapped read-only. Throws user_error naming the path when it cannot be opened or mapped.
class file_mapping {
  public:
    explicit file_mapping(const std::string & path);
    ~file_mapping();
    file_mapping(const file_mapping &) = delete;
    file_mapping & operator=(const file_mapping &) = delete;

    const std::uint8_t * data() const { return data_; }
    std::uint64_t        size() const { return size_; }

  private:
    std::uint8_t * data_ = nullptr;
    std::uint64_t  size_ = 0;
};

// Maps a read-only mapping's pages into this process on a background thread, so that lookups stop taking page
// faults soon after an index is opened, without making the open itself cost more than O(1): on a 4 GB index in
// the page cache a draft step's first touch of a page costs ~5 us (a minor fault; 30 us on a Zen 5 VM), and a step
// touches dozens of new pages for minutes otherwise. Small indexes too: a one-shot `rest generate` on the demo
// model's 20 MB index paid 6.5 of its 7.9 ms of drafting in its first bigram searches (each page first touched
// there), 1.15-1.36x of plain against 1.41-1.68x with the pages mapped in (40 processes, 3 runs each).
// madvise(MADV_POPULATE_READ) in 32 MiB steps (skipped before Linux 5.14), then one read per page (see the
// definition); the destructor stops it between pages and joins. Only for mappings of k_min_bytes or more (a thread costs more than a smaller file's
// faults) that fit in half the physical memory; REST_INDEX_PREFETCH=0 turns it off (and with it the work `then`
// does after it: the datastore's bigram tables).
class page_prefetcher {
  public:
    static constexpr std::uint64_t k_min_bytes = 1ull << 20;
    page_prefetcher() = default;
    ~page_prefetcher();
    page_prefetcher(const page_prefetcher &) = delete;
    page_prefetcher & operator=(const page_prefetcher &) = delete;

    // Starts mapping [data, data + size) in (once; the range must stay mapped until this object is destroyed) on a
    // thread at the lowest CPU priority, then runs `then` on it (work that reads the mapped pages; it must return
    // soon once its stop token is set, and what it uses must outlive this object). The (offset, bytes) ranges of
    // `first` go before the rest: small tables that every lookup reads (a fresh process's first lookups fault on
    // what is not mapped yet).
    void start(const std::uint8_t * data, std::uint64_t size, std::function<void(std::stop_token)> then = {},
               std::vector<std::pair<std::uint64_t, std::uint64_t>> first = {});
    // Whether a thread was started (false: the mapping is too small or too large, or prefetching is off).
    bool started() const { return thread_.joinable(); }
    // Blocks until every page is mapped and `then` has returned (tests and benchmarks).
    void wait();

  private:
    std::jthread thread_;
};

// Anonymous private memory reserved up front. Pages count toward RSS only once touched, so a buffer can reserve a
// whole shard's worth of address space and fill it gradually without reallocating.
class anon_buffer {
  public:
    anon_buffer() = default;
    explicit anon_buffer(std::size_t bytes);
    ~anon_buffer();
    anon_buffer(anon_buffer && o) noexcept;
    anon_buffer & operator=(anon_buffer && o) noexcept;

    std::uint8_t * data() const { return data_; }
    std::size_t    capacity() const { return bytes_; }
    void           release();  // unmaps now

  private:
    std::uint8_t * data_  = nullptr;
    std::size_t    bytes_ = 0;
};

// strerror(errno) as a string.
std::string errno_text();

}  // namespace rest
