#include "index-file.h"

#include "rest/index-builder.h"
#include "rest/types.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

namespace rest {

std::string datastore_temp_path(const std::string & path) {
    return path + ".tmp." + std::to_string(::getpid());
}

index_write_lock::index_write_lock(const std::string & path, wait w) {
    const std::string lock = path + ".lock";
    fd_                    = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw user_error("cannot create lock file '" + lock + "': " + std::strerror(errno));
    int rc;
    while ((rc = ::flock(fd_, w == wait::yes ? LOCK_EX : LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
        ::close(fd_);
        throw user_error("index '" + path + "' is being built, appended to or compacted by another process (" + lock +
                         ")");
    }
}

index_write_lock::~index_write_lock() {
    ::close(fd_);
}

bool remove_if_stale_temp(const std::string & temp) {
    // Exactly NAME.tmp.DIGITS, what datastore_temp_path() writes.
    const std::string name = std::filesystem::path(temp).filename().string();
    const auto        at   = name.rfind(".tmp.");
    if (at == std::string::npos || at == 0 || at + 5 == name.size() ||
        name.find_first_not_of("0123456789", at + 5) != std::string::npos) {
        return false;
    }
    const int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    struct stat st {};
    const bool stale = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    std::error_code ec;
    const bool removed = stale && std::filesystem::remove(temp, ec);
    ::close(fd);
    return removed;
}

std::size_t remove_stale_temps(const std::string & path) {
    namespace fs = std::filesystem;
    const fs::path    p(path);
    const fs::path    dir  = p.has_parent_path() ? p.parent_path() : fs::path(".");
    const std::string stem = p.filename().string() + ".tmp.";
    std::size_t       n    = 0;
    std::error_code   ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() > stem.size() && name.compare(0, stem.size(), stem) == 0 &&
            remove_if_stale_temp(it->path().string())) {
            ++n;
        }
    }
    return n;
}

std::string errno_text() {
    return std::strerror(errno);
}

atomic_file_writer::atomic_file_writer(const std::string & path) : path_(path) {
    temp_path_ = datastore_temp_path(path);
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
        throw user_error("cannot create '" + temp_path_ + "': " + errno_text());
    }
    // Held until the fd closes, also when the process dies: a temp file nobody holds locked is a dead writer's,
    // which the next writer of the index and the server's corpus directory at start remove (remove_if_stale_temp();
    // its pid may be alive again: a container's pid 1).
    ::flock(fd_, LOCK_EX | LOCK_NB);
}

atomic_file_writer::~atomic_file_writer() {
    if (fd_ >= 0) {
        ::close(fd_);
    }
    if (!committed_) {
        ::unlink(temp_path_.c_str());
    }
}

void atomic_file_writer::write(const void * data, std::size_t n) {
    pwrite_at(size_, data, n);
}

void atomic_file_writer::pad_to(std::uint64_t alignment) {
    static const std::vector<char> zeros(65536, 0);
    std::uint64_t left = (alignment - size_ % alignment) % alignment;
    while (left > 0) {
        const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(left, zeros.size()));
        write(zeros.data(), k);
        left -= k;
    }
}

void atomic_file_writer::pwrite_at(std::uint64_t offset, const void * data, std::size_t n) {
    const char * p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t k = ::pwrite(fd_, p, std::min<std::size_t>(n, 1u << 30), static_cast<off_t>(offset));
        if (k < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw user_error("cannot write '" + temp_path_ + "' at byte " + std::to_string(offset) + ": " +
                             errno_text());
        }
        p += k;
        n -= static_cast<std::size_t>(k);
        offset += static_cast<std::uint64_t>(k);
        size_ = std::max(size_, offset);
    }
}

void atomic_file_writer::commit(std::uint64_t drop_pages_min) {
    if (::fsync(fd_) != 0) {
        throw user_error("cannot fsync '" + temp_path_ + "': " + errno_text());
    }
    // The written pages leave the page cache (they are clean now), so that the first process to map the index reads
    // it back. Written, the file sits in 4 KiB pages; read back by the prefetcher, a filesystem with large folios
    // (ext4 from Linux 6.16, XFS) caches it in 2 MiB ones, which the kernel maps with one page-table entry each. On a
    // Zen 5 VM (nested paging), a dependent random read in the 3.6 GB Linux + /usr/include index took 1.7 us in the
    // written pages against 0.38 us read back, and the draft step's p99 fell from 224-262 to 124-130 us; on the 287
    // MB /usr/include index, 16-28 against 24-36 us. A file under 64 MiB keeps them: its page tables stay in the
    // caches, and dropped, a fresh process's first draft steps read it back from the disk (the demo model's 23 MB
    // index: first 10 steps 0.9-1.0 ms kept against 1.7-3.7 ms).
    if (size_ >= drop_pages_min) (void) ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
    // Renamed while still open, so still locked: closed first, the finished temp file looked like a dead writer's to
    // a process starting meanwhile (remove_if_stale_temp()), which removed it.
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
        throw user_error("cannot rename '" + temp_path_ + "' to '" + path_ + "': " + errno_text());
    }
    ::close(fd_);
    fd_ = -1;
    committed_ = true;
    // Make the rename itself durable. Failure here leaves a complete file, so it is not an error.
    const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
    const std::filesystem::path dir    = parent.empty() ? std::filesystem::path(".") : parent;
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

file_mapping::file_mapping(const std::string & path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        throw user_error("cannot open index '" + path + "': " + errno_text());
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const std::string why = errno_text();
        ::close(fd);
        throw user_error("cannot stat index '" + path + "': " + why);
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw user_error("index '" + path + "' is a directory, expected an index file");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    if (size_ > 0) {
        void * p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            const std::string why = errno_text();
            ::close(fd);
            throw user_error("cannot mmap index '" + path + "': " + why);
        }
        data_ = static_cast<std::uint8_t *>(p);
    }
    ::close(fd);  // the mapping keeps the file alive
}

file_mapping::~file_mapping() {
    if (data_) {
        ::munmap(data_, size_);
    }
}

void page_prefetcher::start(const std::uint8_t * data, std::uint64_t size, std::function<void(std::stop_token)> then,
                            std::vector<std::pair<std::uint64_t, std::uint64_t>> first) {
    const char *            env         = std::getenv("REST_INDEX_PREFETCH");
    const long              pages       = ::sysconf(_SC_PHYS_PAGES);
    const long              page        = ::sysconf(_SC_PAGESIZE);
    const std::uint64_t     phys        = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
    if (thread_.joinable() || !data || size < k_min_bytes || size > phys / 2 || (env && std::strcmp(env, "0") == 0)) {
        return;
    }
#ifdef MADV_HUGEPAGE
    // Asks for 2 MiB pages where the kernel can back a file with them (see atomic_file_writer::commit): page cache
    // read in for this mapping comes in as huge folios, and kernels with read-only file THP collapse it in the
    // background. Only here, where the whole file is read anyway: for an index that does not fit, a 2 MiB read per
    // random fault would be waste.
    (void) ::madvise(const_cast<std::uint8_t *>(data), size, MADV_HUGEPAGE);
#endif
    thread_ = std::jthread([data, size, page, then = std::move(then), first = std::move(first)](std::stop_token stop) {
        // Lowest CPU priority, all along: where every core decodes, this waits instead of slowing the decoding down.
        // (On Linux a thread's nice value is its own; the "process" id here is the thread's.) At normal priority,
        // reading a 3.8 GB index from the disk took a core from a two-thread decode: a TinyLlama-shaped Q4_0 model
        // on 2 vCPUs generated its first 48 tokens at 15-32 tok/s (seven runs), against 33-41 at nice 19 (five,
        // alternated) and 42-50 without an index. Where a core is free (one decoding thread, or the index in the
        // page cache) it made no difference: draft-step p99 34-39 us either way on that index, one-shot runs on the
        // demo model and stories260K alike.
        (void) ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);
        // First every page is mapped, the tables before the rest of the file (cheap where the page cache holds 2 MiB
        // folios: one entry each); then every page is read once, the tables first again, since mapped is not yet
        // cheap to reach. On a Zen 5 VM (nested paging) a thread's first read of each populated 4 KiB page still
        // cost ~1.3 us; a fresh process's first 200 bigram searches on the demo model's 20 MB index took 3.4-8 ms
        // (p50 11-28 us each) against 0.35-0.53 ms (p50 1.7-1.8 us) once this thread had read every page (6-7 ms of
        // its time for 20 MB).
        // Interleaved per 32 MiB instead, the reads held the mapping of a 3.6 GB page-cached index back: a fresh
        // process's draft steps took minor faults for its first ~30 ms, p99 45-56 us against 35-38 us with the
        // mapping done first (three processes each).
        const auto each_step = [&](std::uint64_t from, std::uint64_t bytes, auto && f) {
            constexpr std::uint64_t k_step = 32ull << 20;
            const std::uint64_t     end    = from + std::min(bytes, size - std::min(from, size));
            for (std::uint64_t off = from; off < end && !stop.stop_requested(); off += k_step) {
                f(off, std::min(k_step, end - off));
            }
        };
        const auto map_in = [&](std::uint64_t off, std::uint64_t n) {
#ifdef MADV_POPULATE_READ
            // From the page the range starts in (madvise wants a page-aligned address; sections are 4096-aligned,
            // pages may be larger). EINVAL before Linux 5.14: the reads fault the pages in instead.
            const std::uint64_t from = off / static_cast<std::uint64_t>(page) * static_cast<std::uint64_t>(page);
            (void) ::madvise(const_cast<std::uint8_t *>(data) + from, n + (off - from), MADV_POPULATE_READ);
#endif
        };
        const auto read_in = [&](std::uint64_t off, std::uint64_t n) {
            volatile std::uint8_t sink = 0;
            for (std::uint64_t p = off; p < off + n && !stop.stop_requested(); p += static_cast<std::uint64_t>(page)) {
                sink = sink + data[p];
            }
        };
        for (const auto & [off, bytes] : first) each_step(off, bytes, map_in);
        each_step(0, size, map_in);
        for (const auto & [off, bytes] : first) each_step(off, bytes, read_in);
        each_step(0, size, read_in);
        if (then && !stop.stop_requested()) {
            then(stop);
        }
    });
}

void page_prefetcher::wait() {
    if (thread_.joinable()) {
        thread_.join();
    }
}

page_prefetcher::~page_prefetcher() = default;  // std::jthread: asks the thread to stop, then joins it

anon_buffer::anon_buffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) {
        return;
    }
    void * p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        bytes_ = 0;
        throw std::bad_alloc();
    }
    data_ = static_cast<std::uint8_t *>(p);
}

anon_buffer::~anon_buffer() {
    release();
}

anon_buffer::anon_buffer(anon_buffer && o) noexcept :
    data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

anon_buffer & anon_buffer::operator=(anon_buffer && o) noexcept {
    if (this != &o) {
        release();
        data_  = std::exchange(o.data_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

void anon_buffer::release() {
    if (data_) {
        ::munmap(data_, bytes_);
    }
    data_  = nullptr;
    bytes_ = 0;
}

}  // namespace rest
