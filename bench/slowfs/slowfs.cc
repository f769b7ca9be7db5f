// slowfs: a read-only FUSE passthrough filesystem that emulates slow (network) storage for the
// benchmarks and integration tests (issue 4, §4). It serves SOURCE_DIR at MOUNTPOINT and makes
// every read request cost a fixed latency, under a global bandwidth cap.
//
//   slowfs SOURCE_DIR MOUNTPOINT [--latency-ms=F] [--bandwidth-mbps=F]
//          [--tail-latency-ms=F --tail-fraction=F [--tail-error]] [--foreground] ...
//   (`slowfs --help`; README.md beside this file; bench/slowfs/with_slowfs.sh mounts it for one
//   command.)
//
// The cost model, per FUSE read request that returns n > 0 bytes, arriving at time t (monotonic):
//   done = max(t + latency, previous_done) + n / bandwidth        (bandwidth: 1 MB/s = 1e6 B/s)
//   (+ the tail latency for the requests picked as stragglers: --tail-fraction of them, chosen
//   by a hash of the request's number, so a run's pattern repeats; previous_done leaves it out,
//   so a straggler holds up no other request; with --tail-error it answers EIO at its `done`)
//   the request is answered at `done` (the real pread() runs first; its time is part of the wait).
// The second term is a token bucket with a burst of one request (a virtual-clock shaper, GCRA),
// shared by all requests: the total stays under the cap, whatever the number of readers. Without
// a cap (0), done = t + latency. Requests are served by a multi-threaded loop (--threads workers),
// so concurrent requests wait out their latencies together: N parallel readers get N times the
// throughput of one, as on network storage. A request at or past the end of the file returns 0
// bytes at once, as a client that knows the file size would not send it.
//
// What one request is (kernel side, see README.md "Request size"): every file is opened with
// direct_io, so there is no page cache and no kernel readahead: each read()/pread() call becomes
// requests of at most 256 pages (1 MiB; libfuse 3 negotiates max_pages = 256), sent one after the
// other. The limit counts pages of the caller's buffer, so a 1 MiB read into a buffer that is not
// page-aligned spans 257 pages and arrives as two requests: 1 MiB - k bytes, then k < 4 KiB bytes.
// Such a tail (under one page, continuing on the same open file a run of requests that began
// with one cut just short of 1 MiB) pays bandwidth but no latency: it is the same read.
// So a read() of up to 1 MiB costs one latency whatever its buffer's alignment; the loader's
// 1 MiB reads cost one each. Asynchronous direct I/O is switched off, so an io_uring/AIO read
// larger than 1 MiB is split the same way instead of into concurrent requests.
//
// Counters (reads, requests, bytes, in-flight maximum, ...) are printed as JSON on stderr at
// unmount and readable at any time from the virtual file MOUNTPOINT/.slowfs_stats (JSON, not
// listed by readdir; excluded from the counters and from the delay). SIGUSR1 resets them.
//
// Exit status: 0 after an unmount (fusermount3 -u, or SIGTERM/SIGINT/SIGHUP in the foreground);
// 2 for bad arguments or a source directory that can't be opened (the message names it); 3 when
// the mount is refused (no /dev/fuse, not permitted; libfuse's reason and what FUSE needs are
// printed); 1 for other libfuse failures. Write operations of any kind fail with EROFS (the
// mount is `ro`). Metadata operations (getattr, readdir, open) are served at local speed:
// only reads are slow.
#define FUSE_USE_VERSION 312

#include <dirent.h>
#include <fcntl.h>
#include <fuse.h>
#include <fuse_lowlevel.h>  // fuse_parse_cmdline
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

constexpr char kStatsPath[] = "/.slowfs_stats";
constexpr unsigned kDefaultThreads = 64;  // > the benchmarks' 16 parallel reads, with room
constexpr double kBytesPerMB = 1e6;
constexpr int kExitUsage = 2;         // bad arguments, source directory missing
constexpr int kExitMountFailed = 3;   // FUSE unavailable or mounting not permitted
constexpr int kExitFuseSetup = 1;     // libfuse rejected the options, or its loop failed
// The kernel's largest read request with libfuse 3: max_pages (256) pages of the caller's buffer.
constexpr uint64_t kMaxRequestPages = 256;

struct Settings {
  std::string source_dir;
  std::string mountpoint;
  double latency_ms = 0;
  double bandwidth_mbps = 0;  // 0 = no cap
  double tail_latency_ms = 0;  // added to the requests picked as stragglers
  double tail_fraction = 0;    // of the requests that pay the latency, 0..1
  bool tail_error = false;     // stragglers answer EIO after their delay instead of their bytes
  unsigned threads = kDefaultThreads;
  bool foreground = false;
  bool debug = false;
  std::vector<std::string> fuse_options;  // -o values passed through to libfuse
};

// Counters: lock-free atomics so that SIGUSR1 can reset them from a signal handler.
struct Counters {
  std::atomic<uint64_t> reads{0};     // requests that paid the latency: the application's reads
  std::atomic<uint64_t> tail_reads{0};  // ... of them, those that paid the tail latency too
  std::atomic<uint64_t> requests{0};  // every read request with data, split tails included
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> in_flight{0};
  std::atomic<uint64_t> in_flight_max{0};
  std::atomic<uint64_t> max_request_bytes{0};
  std::atomic<uint64_t> opens{0};
  std::atomic<uint64_t> delay_ns{0};  // sum over requests of (answered - arrived)
  std::atomic<uint64_t> resets_begun{0};  // with `resets`, a seqlock: StatsJson never mixes old and new
  std::atomic<uint64_t> resets{0};        // resets completed
};

Settings g_settings;
Counters g_counters;
int g_source_fd = -1;
int64_t g_latency_ns = 0;
int64_t g_tail_latency_ns = 0;
uint64_t g_tail_threshold = 0;  // a request is a straggler when Mix(its number) < this
std::atomic<uint64_t> g_request_number{0};  // of the requests that pay the latency; never reset
double g_ns_per_byte = 0;  // 0 = no bandwidth cap
uint64_t g_page_bytes = 4096;
std::mutex g_bucket_mutex;
int64_t g_bucket_next_free_ns = 0;  // guarded by g_bucket_mutex

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

void SleepUntilNs(int64_t deadline_ns) {
  timespec ts{static_cast<time_t>(deadline_ns / 1'000'000'000), static_cast<long>(deadline_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// SplitMix64's output function: request numbers 0, 1, 2, ... to well-spread 64-bit values.
uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void RaiseMax(std::atomic<uint64_t>& max, uint64_t value) {
  uint64_t seen = max.load(std::memory_order_relaxed);
  while (value > seen && !max.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

void ResetCounters(int) {
  g_counters.resets_begun.fetch_add(1);
  g_counters.reads.store(0);
  g_counters.tail_reads.store(0);
  g_counters.requests.store(0);
  g_counters.bytes.store(0);
  g_counters.max_request_bytes.store(0);
  g_counters.opens.store(0);
  g_counters.delay_ns.store(0);
  g_counters.in_flight_max.store(g_counters.in_flight.load());
  g_counters.resets.fetch_add(1);
}

std::string StatsJson() {
  nlohmann::json j;
  // A reset can run on another thread while the counters are read: read again until none began
  // or was in progress (resets_begun == resets completed before the reads).
  uint64_t resets = 0;
  do {
    resets = g_counters.resets.load();
    j["reads"] = g_counters.reads.load();
    j["tail_reads"] = g_counters.tail_reads.load();
    j["requests"] = g_counters.requests.load();
    j["bytes"] = g_counters.bytes.load();
    j["in_flight"] = g_counters.in_flight.load();
    j["in_flight_max"] = g_counters.in_flight_max.load();
    j["max_request_bytes"] = g_counters.max_request_bytes.load();
    j["opens"] = g_counters.opens.load();
    j["delay_s"] = static_cast<double>(g_counters.delay_ns.load()) / 1e9;
  } while (g_counters.resets_begun.load() != resets);
  j["resets"] = resets;
  j["latency_ms"] = g_settings.latency_ms;
  j["bandwidth_mbps"] = g_settings.bandwidth_mbps;
  j["tail_latency_ms"] = g_settings.tail_latency_ms;
  j["tail_fraction"] = g_settings.tail_fraction;
  j["tail_error"] = g_settings.tail_error;
  j["threads"] = g_settings.threads;
  j["source"] = g_settings.source_dir;
  j["pid"] = static_cast<int64_t>(::getpid());
  return j.dump() + "\n";
}

// FUSE paths are absolute within the mount ("/", "/a/b"); the source is reached relative to its
// directory fd so that the source path is resolved once, at start.
std::string Relative(const char* path) {
  while (*path == '/') ++path;
  return *path == '\0' ? std::string(".") : std::string(path);
}

bool IsStats(const char* path) { return std::strcmp(path, kStatsPath) == 0; }

// Per open file: the real fd, or the stats snapshot taken at open.
struct OpenFile {
  int fd = -1;
  std::string stats;
  std::mutex mutex;            // guards the split-tail state
  uint64_t last_end = 0;       // offset + size of the last request
  bool split_pending = false;  // the last request was a cut (or full) chunk of a split read()
};

// True when a request is the tail of a read() the kernel split at its page limit (header
// comment): under one page, continuing a run of requests that began with one cut just short of
// the limit (1 MiB - k) and went on with full 1 MiB ones. Updates the file's state.
bool IsSplitTail(OpenFile* file, uint64_t offset, uint64_t size) {
  const uint64_t limit = kMaxRequestPages * g_page_bytes;
  const bool cut = size > limit - g_page_bytes && size < limit;
  std::lock_guard<std::mutex> lock(file->mutex);
  const bool continues = file->split_pending && offset == file->last_end;
  const bool tail = continues && size < g_page_bytes;
  file->split_pending = cut || (continues && size == limit);
  file->last_end = offset + size;
  return tail;
}

OpenFile* Handle(fuse_file_info* fi) { return reinterpret_cast<OpenFile*>(static_cast<uintptr_t>(fi->fh)); }

// Every OpenFile not yet released. The kernel sends RELEASE asynchronously after the last
// close(), so an unmount right after a close can end the session before it arrives; Destroy
// frees what is left (under AddressSanitizer that was a reported leak).
std::mutex g_open_mutex;
std::unordered_set<OpenFile*> g_open_files;

void Forget(OpenFile* file) {
  {
    std::lock_guard lock(g_open_mutex);
    g_open_files.erase(file);
  }
  if (file->fd >= 0) ::close(file->fd);
  delete file;
}

void* Init(fuse_conn_info* conn, fuse_config* cfg) {
  // No page cache and no readahead: one application read() = requests of at most 1 MiB (see
  // the header comment). Async DIO would turn one large AIO read into concurrent requests;
  // without it they go one after the other, like sync reads.
  conn->want &= ~FUSE_CAP_ASYNC_DIO;
  conn->max_readahead = 0;
  cfg->direct_io = 1;
  cfg->kernel_cache = 0;
  cfg->use_ino = 1;
  return nullptr;
}

void Destroy(void*) {
  std::fprintf(stderr, "slowfs: unmounted %s, stats: %s", g_settings.mountpoint.c_str(), StatsJson().c_str());
  std::unordered_set<OpenFile*> left;
  {
    std::lock_guard lock(g_open_mutex);
    left.swap(g_open_files);
  }
  for (OpenFile* file : left) {
    if (file->fd >= 0) ::close(file->fd);
    delete file;
  }
}

int GetAttr(const char* path, struct stat* st, fuse_file_info*) {
  if (IsStats(path)) {
    std::memset(st, 0, sizeof *st);
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_uid = ::getuid();
    st->st_gid = ::getgid();
    // The size of a snapshot now; reads go to EOF of the snapshot taken at open (direct_io).
    st->st_size = static_cast<off_t>(StatsJson().size());
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    st->st_atim = st->st_mtim = st->st_ctim = now;
    return 0;
  }
  if (::fstatat(g_source_fd, Relative(path).c_str(), st, AT_SYMLINK_NOFOLLOW) < 0) return -errno;
  return 0;
}

int ReadLink(const char* path, char* buf, size_t size) {
  if (size == 0) return -EINVAL;
  ssize_t n = ::readlinkat(g_source_fd, Relative(path).c_str(), buf, size - 1);
  if (n < 0) return -errno;
  buf[n] = '\0';
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t filler, off_t, fuse_file_info*, fuse_readdir_flags) {
  int fd = ::openat(g_source_fd, Relative(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    int e = errno;
    ::close(fd);
    return -e;
  }
  while (dirent* entry = ::readdir(dir)) {
    struct stat st {};
    st.st_ino = entry->d_ino;
    st.st_mode = static_cast<mode_t>(DTTOIF(entry->d_type));
    if (filler(buf, entry->d_name, &st, 0, static_cast<fuse_fill_dir_flags>(0)) != 0) break;
  }
  ::closedir(dir);
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  auto file = new OpenFile;
  if (IsStats(path)) {
    file->stats = StatsJson();
  } else {
    file->fd = ::openat(g_source_fd, Relative(path).c_str(), O_RDONLY | O_CLOEXEC);
    if (file->fd < 0) {
      int e = errno;
      delete file;
      return -e;
    }
    g_counters.opens.fetch_add(1, std::memory_order_relaxed);
  }
  fi->direct_io = 1;
  fi->keep_cache = 0;
  fi->fh = reinterpret_cast<uintptr_t>(file);
  std::lock_guard lock(g_open_mutex);
  g_open_files.insert(file);
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  OpenFile* file = Handle(fi);
  if (file->fd < 0) {  // the stats snapshot: no delay, not counted
    if (offset < 0 || static_cast<size_t>(offset) >= file->stats.size()) return 0;
    size_t n = std::min(size, file->stats.size() - static_cast<size_t>(offset));
    std::memcpy(buf, file->stats.data() + offset, n);
    return static_cast<int>(n);
  }
  const int64_t arrived = NowNs();
  RaiseMax(g_counters.in_flight_max, g_counters.in_flight.fetch_add(1) + 1);
  RaiseMax(g_counters.max_request_bytes, size);
  const bool tail = IsSplitTail(file, static_cast<uint64_t>(offset), size);

  size_t got = 0;
  int result = 0;
  while (got < size) {
    ssize_t n = ::pread(file->fd, buf + got, size - got, offset + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      result = -errno;
      break;
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (result == 0 && got > 0) {
    // (`tail` here is a split read's tail, which pays no latency; a straggler pays the tail latency.)
    const bool straggler = !tail && g_tail_threshold > 0 && Mix(g_request_number.fetch_add(1)) < g_tail_threshold;
    int64_t done = arrived + (tail ? 0 : g_latency_ns);
    if (g_ns_per_byte > 0) {
      std::lock_guard<std::mutex> lock(g_bucket_mutex);
      done = std::max(done, g_bucket_next_free_ns) + static_cast<int64_t>(g_ns_per_byte * static_cast<double>(got));
      g_bucket_next_free_ns = done;
    }
    // After the bandwidth: a straggler is late by itself, it holds up no other request.
    if (straggler) done += g_tail_latency_ns;
    SleepUntilNs(done);
    g_counters.requests.fetch_add(1, std::memory_order_relaxed);
    if (!tail) g_counters.reads.fetch_add(1, std::memory_order_relaxed);
    if (straggler) g_counters.tail_reads.fetch_add(1, std::memory_order_relaxed);
    if (straggler && g_settings.tail_error) result = -EIO;  // a request that timed out
    g_counters.bytes.fetch_add(got, std::memory_order_relaxed);
    g_counters.delay_ns.fetch_add(static_cast<uint64_t>(NowNs() - arrived), std::memory_order_relaxed);
  }
  g_counters.in_flight.fetch_sub(1);
  return result == 0 ? static_cast<int>(got) : result;
}

int Release(const char*, fuse_file_info* fi) {
  Forget(Handle(fi));
  return 0;
}

int StatFs(const char*, struct statvfs* st) { return ::fstatvfs(g_source_fd, st) < 0 ? -errno : 0; }

// Every write-side operation: read-only storage. The mount is also `ro`, so the kernel normally
// answers EROFS before these are reached; they cover a user who passes `-o rw`.
int RoMode(const char*, mode_t) { return -EROFS; }
int RoPath(const char*) { return -EROFS; }
int RoTwoPaths(const char*, const char*) { return -EROFS; }
int RoRename(const char*, const char*, unsigned) { return -EROFS; }
int RoMknod(const char*, mode_t, dev_t) { return -EROFS; }
int RoChmod(const char*, mode_t, fuse_file_info*) { return -EROFS; }
int RoChown(const char*, uid_t, gid_t, fuse_file_info*) { return -EROFS; }
int RoTruncate(const char*, off_t, fuse_file_info*) { return -EROFS; }
int RoWrite(const char*, const char*, size_t, off_t, fuse_file_info*) { return -EROFS; }
int RoCreate(const char*, mode_t, fuse_file_info*) { return -EROFS; }
int RoUtimens(const char*, const timespec[2], fuse_file_info*) { return -EROFS; }
int RoSetXattr(const char*, const char*, const char*, size_t, int) { return -EROFS; }
int RoRemoveXattr(const char*, const char*) { return -EROFS; }
int RoFallocate(const char*, int, off_t, off_t, fuse_file_info*) { return -EROFS; }

fuse_operations Operations() {
  fuse_operations ops{};
  ops.init = Init;
  ops.destroy = Destroy;
  ops.getattr = GetAttr;
  ops.readlink = ReadLink;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  ops.statfs = StatFs;
  ops.mknod = RoMknod;
  ops.mkdir = RoMode;
  ops.unlink = RoPath;
  ops.rmdir = RoPath;
  ops.symlink = RoTwoPaths;
  ops.link = RoTwoPaths;
  ops.rename = RoRename;
  ops.chmod = RoChmod;
  ops.chown = RoChown;
  ops.truncate = RoTruncate;
  ops.write = RoWrite;
  ops.create = RoCreate;
  ops.utimens = RoUtimens;
  ops.setxattr = RoSetXattr;
  ops.removexattr = RoRemoveXattr;
  ops.fallocate = RoFallocate;
  return ops;
}

constexpr char kUsage[] =
    R"(usage: slowfs SOURCE_DIR MOUNTPOINT [options]

Serves SOURCE_DIR read-only at MOUNTPOINT (FUSE) and makes every read request slow, to emulate
network storage for benchmarks. Returns once mounted (unless --foreground). Unmount with
`fusermount3 -u MOUNTPOINT`, or SIGTERM / Ctrl-C in --foreground, where the counters are then
printed as JSON on stderr.

options:
  --latency-ms=F       added to every read request, in milliseconds (default 0). Concurrent
                       requests wait out their latencies together.
  --bandwidth-mbps=F   cap on the total read bandwidth of the mount, in MB/s (1 MB = 1e6 bytes;
                       default 0 = no cap)
  --tail-latency-ms=F  added on top of --latency-ms to a --tail-fraction of the read requests:
  --tail-fraction=F    stragglers, as network storage has (a p99 of 200 ms over a median of
                       20 ms: --latency-ms=20 --tail-latency-ms=180 --tail-fraction=0.01).
                       The requests are picked by a hash of their number (the same pattern
                       every run); default 0 = none
  --tail-error         the stragglers answer EIO (after their delay) instead of their bytes: a
                       request that timed out, as gcsfuse and s3fs report one
  --threads=N          FUSE worker threads = most requests served at once (default 64)
  -f, --foreground     stay in the foreground (default: daemonize once mounted)
  -d, --debug          libfuse debug output (implies --foreground)
  -o OPT[,OPT...]      libfuse / mount options, e.g. -o allow_other (see `man mount.fuse3`)
  -h, --help           this text

One read: files are opened with direct_io (no page cache, no readahead), so each read() or
pread() of up to 1 MiB costs one latency; larger reads are split into 1 MiB requests sent one
after the other, one latency each. Reads at the end of a file return at once.

MOUNTPOINT/.slowfs_stats (not listed) holds the counters as JSON: reads, requests, bytes,
in_flight, in_flight_max, max_request_bytes, opens, delay_s, ... `kill -USR1 PID` (the pid is
in the JSON) resets them.

example:
  slowfs /data/train /mnt/slow --latency-ms=20 --bandwidth-mbps=200
  bench/slowfs/with_slowfs.sh /data/train 20 200 -- build/daemon/ringfeedd --config job.yaml
)";

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr, "slowfs: %s\n(run `slowfs --help` for the usage)\n", message.c_str());
  std::exit(kExitUsage);
}

double ParseNonNegative(const std::string& option, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end == nullptr || *end != '\0' || errno != 0 || !(v >= 0) || v > 1e9) {
    UsageError(option + ": '" + value + "' is not a number from 0 to 1e9");
  }
  return v;
}

Settings ParseArgs(int argc, char** argv) {
  Settings s;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      value = arg.substr(arg.find('=') + 1);
      has_value = true;
    }
    auto take_value = [&]() {
      if (has_value) return value;
      if (i + 1 >= argc) UsageError(name + " needs a value");
      return std::string(argv[++i]);
    };
    if (name == "-h" || name == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (name == "--latency-ms") {
      s.latency_ms = ParseNonNegative(name, take_value());
    } else if (name == "--bandwidth-mbps") {
      s.bandwidth_mbps = ParseNonNegative(name, take_value());
    } else if (name == "--tail-latency-ms") {
      s.tail_latency_ms = ParseNonNegative(name, take_value());
    } else if (name == "--tail-fraction") {
      s.tail_fraction = ParseNonNegative(name, take_value());
      if (s.tail_fraction > 1) UsageError("--tail-fraction: give a fraction from 0 to 1");
    } else if (name == "--tail-error") {
      s.tail_error = true;
    } else if (name == "--threads") {
      double t = ParseNonNegative(name, take_value());
      if (t < 1 || t > 100000 || t != static_cast<double>(static_cast<unsigned>(t))) {
        UsageError("--threads: give a whole number >= 1");
      }
      s.threads = static_cast<unsigned>(t);
    } else if (name == "-f" || name == "--foreground") {
      s.foreground = true;
    } else if (name == "-d" || name == "--debug") {
      s.debug = s.foreground = true;
    } else if (name == "-o") {
      s.fuse_options.push_back(take_value());
    } else if (arg.rfind("-o", 0) == 0 && arg.size() > 2) {
      s.fuse_options.push_back(arg.substr(2));
    } else if (!arg.empty() && arg[0] == '-') {
      UsageError("unknown option '" + arg + "'");
    } else {
      positional.push_back(arg);
    }
  }
  if (s.tail_fraction > 0 && s.tail_latency_ms == 0) UsageError("--tail-fraction needs --tail-latency-ms");
  if (s.tail_error && s.tail_fraction == 0) UsageError("--tail-error needs --tail-fraction");
  if (positional.size() != 2) {
    UsageError("expected SOURCE_DIR and MOUNTPOINT, got " + std::to_string(positional.size()) + " arguments");
  }
  s.source_dir = positional[0];
  s.mountpoint = positional[1];
  return s;
}

// fuse_main() step by step, so that an unmount by SIGTERM/SIGINT/SIGHUP exits 0 (fuse_main
// returns 8 then) and a refused mount exits 3 with a message saying what FUSE needs.
int Serve(int argc, char** argv) {
  fuse_args args = FUSE_ARGS_INIT(argc, argv);
  fuse_cmdline_opts opts{};
  if (fuse_parse_cmdline(&args, &opts) != 0) return kExitFuseSetup;
  const fuse_operations ops = Operations();
  int status = kExitFuseSetup;
  fuse* fs = fuse_new(&args, &ops, sizeof ops, nullptr);
  if (fs == nullptr) {
    std::fprintf(stderr, "slowfs: libfuse rejected the options (message above)\n");
  } else if (fuse_mount(fs, opts.mountpoint) != 0) {
    std::fprintf(stderr,
                 "slowfs: cannot mount at %s (libfuse's reason above); FUSE needs /dev/fuse and root or the "
                 "setuid fusermount3 (package fuse3); in a container --device /dev/fuse --cap-add SYS_ADMIN\n",
                 opts.mountpoint);
    status = kExitMountFailed;
  } else {
    fuse_session* session = fuse_get_session(fs);
    if (fuse_daemonize(opts.foreground) == 0 && fuse_set_signal_handlers(session) == 0) {
      fuse_loop_config* loop = fuse_loop_cfg_create();
      fuse_loop_cfg_set_clone_fd(loop, opts.clone_fd);
      fuse_loop_cfg_set_idle_threads(loop, opts.max_idle_threads);
      fuse_loop_cfg_set_max_threads(loop, opts.max_threads);
      const int result = fuse_loop_mt(fs, loop);  // the signal number when a signal ended it
      fuse_loop_cfg_destroy(loop);
      fuse_remove_signal_handlers(session);
      const bool by_signal = std::abs(result) == SIGTERM || std::abs(result) == SIGINT || std::abs(result) == SIGHUP;
      if (result != 0 && !by_signal) std::fprintf(stderr, "slowfs: the FUSE loop failed (%d)\n", result);
      status = result == 0 || by_signal ? 0 : kExitFuseSetup;
    }
    fuse_unmount(fs);
  }
  if (fs != nullptr) fuse_destroy(fs);  // calls Destroy(): the counters
  std::free(opts.mountpoint);
  fuse_opt_free_args(&args);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  g_settings = ParseArgs(argc, argv);
  g_source_fd = ::open(g_settings.source_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (g_source_fd < 0) {
    std::fprintf(stderr, "slowfs: source directory '%s': %s; give an existing directory to serve\n",
                 g_settings.source_dir.c_str(), std::strerror(errno));
    return kExitUsage;
  }
  // Absolute, for the stats and `mount`: a daemonized slowfs runs in /.
  if (char* absolute = ::realpath(g_settings.source_dir.c_str(), nullptr)) {
    g_settings.source_dir = absolute;
    std::free(absolute);
  }
  g_latency_ns = static_cast<int64_t>(g_settings.latency_ms * 1e6);
  g_tail_latency_ns = static_cast<int64_t>(g_settings.tail_latency_ms * 1e6);
  // fraction x 2^64, saturating at 2^64 - 1 (a fraction of 1 then misses one value in 2^64).
  g_tail_threshold = g_tail_latency_ns == 0 ? 0
                     : g_settings.tail_fraction >= 1.0
                         ? UINT64_MAX
                         : static_cast<uint64_t>(std::ldexp(g_settings.tail_fraction, 64));
  g_page_bytes = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  g_ns_per_byte = g_settings.bandwidth_mbps > 0 ? 1e9 / (g_settings.bandwidth_mbps * kBytesPerMB) : 0;

  struct sigaction reset {};
  reset.sa_handler = ResetCounters;
  sigemptyset(&reset.sa_mask);
  reset.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &reset, nullptr);

  // fsname shows the source in `mount` and `df`; libfuse splits -o values at commas.
  std::string fsname = g_settings.source_dir.find_first_of(",\\") == std::string::npos
                           ? "slowfs:" + g_settings.source_dir
                           : std::string("slowfs");
  // max_idle_threads: libfuse 3.14's default (unlimited) prints a spurious "invalid" warning.
  const std::string threads = std::to_string(g_settings.threads);
  std::vector<std::string> args = {
      argv[0], g_settings.mountpoint, "-o",
      "ro,subtype=slowfs,fsname=" + fsname + ",max_threads=" + threads + ",max_idle_threads=" + threads};
  if (g_settings.foreground) args.push_back("-f");
  if (g_settings.debug) args.push_back("-d");
  for (const auto& o : g_settings.fuse_options) {
    args.push_back("-o");
    args.push_back(o);
  }
  std::vector<char*> fuse_argv;
  for (auto& a : args) fuse_argv.push_back(a.data());
  fuse_argv.push_back(nullptr);

  return Serve(static_cast<int>(fuse_argv.size() - 1), fuse_argv.data());
}
