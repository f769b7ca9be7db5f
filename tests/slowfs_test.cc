// slowfs (bench/slowfs): the slow-storage FUSE filesystem, mounted for real over a temporary
// directory and read through the kernel. Checks that it passes bytes and TFRecord records
// through unchanged, that a 1 MiB read costs one latency whatever its buffer's alignment, that
// parallel readers overlap their latencies, that the bandwidth cap holds across readers, and
// that every write fails with EROFS.
//
// Timing assertions are bounds the emulation guarantees (a lower bound from the sleeps, an upper
// bound at 0.6x of what serial requests would need), never tight windows.
// Skips ("RINGFEED_SKIP:", CTest: skipped) where /dev/fuse is missing or mounting is not
// permitted (slowfs exits 3: containers without CAP_SYS_ADMIN, no fusermount3), also with
// CI=true: FUSE is a property of the machine, not of the checkout.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/hedge_budget.h"
#include "format/read_queue.h"
#include "format/tfrecord_reader.h"
#include "format/tfrecord_writer.h"
#include "tests/slowfs_mount.h"
#include "tests/test_support.h"


namespace {

using ringfeed::testing::ReadFile;
using ringfeed::testing::RunQuietly;
using ringfeed::testing::SlowMount;
using ringfeed::testing::TempDir;
using ringfeed::testing::WriteFile;
using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = size_t{1} << 20;
constexpr auto kEventually = std::chrono::seconds(10);

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n + 8, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t word = rng();
    std::memcpy(s.data() + i, &word, 8);
  }
  s.resize(n);
  return s;
}

// Reads a whole file with `chunk`-byte read() calls; returns the byte count.
size_t ReadAll(const std::string& path, size_t chunk) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::string buf(chunk, '\0');
  size_t total = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), chunk);
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  ::close(fd);
  return total;
}

uint64_t Counter(const nlohmann::json& stats, const char* name) { return stats.at(name).get<uint64_t>(); }

// Whether io_uring can read files in this process (ReadQueue::Available); Skip()s the test
// case, saying why, when not.
bool QueuedReadsOrSkip() {
  std::string why;
  if (ringfeed::ReadQueue::Available(&why)) return true;
  ringfeed::testing::Skip("io_uring cannot read files here: " + why);
  return false;
}

}  // namespace

TEST_CASE("slowfs passes bytes, records and directories through unchanged") {
  TempDir source;
  std::vector<std::string> records;
  for (int i = 0; i < 300; ++i) records.push_back(RandomBytes(1000 + 37 * static_cast<size_t>(i), i));
  records.push_back(RandomBytes(3 * kMiB, 999));  // larger than the reader's 1 MiB window
  {
    ringfeed::TFRecordWriter plain(source.file("part-0.tfrecord"));
    for (const auto& r : records) plain.Write(r);
    plain.Close();
    ringfeed::TFRecordWriter gzip(source.file("part-1.tfrecord.gz"), {.compression = ringfeed::Compression::kGzip});
    for (const auto& r : records) gzip.Write(r);
    gzip.Close();
  }
  std::filesystem::create_directory(source.path() / "sub");
  WriteFile(source.file("sub/raw.bin"), RandomBytes(100'000, 7));

  SlowMount mount(source.path().string(), {"--latency-ms=0.1"});
  if (!mount.mounted()) return mount.PrintSkip();

  for (const char* name : {"part-0.tfrecord", "part-1.tfrecord.gz", "sub/raw.bin"}) {
    INFO(name);
    CHECK(ReadFile(mount.path(name).string()) == ReadFile(source.file(name)));
    CHECK(std::filesystem::file_size(mount.path(name)) == std::filesystem::file_size(source.path() / name));
  }
  // The loader's reader over the mount: every record, every CRC, both compressions.
  for (const char* name : {"part-0.tfrecord", "part-1.tfrecord.gz"}) {
    INFO(name);
    ringfeed::TFRecordReader reader(mount.path(name).string());
    ringfeed::Record record;
    ringfeed::ReadError error;
    size_t i = 0;
    ringfeed::TFRecordReader::Status status;
    while ((status = reader.Next(&record, &error)) == ringfeed::TFRecordReader::Status::kRecord) {
      REQUIRE(i < records.size());
      CHECK(std::string(reinterpret_cast<const char*>(record.data.data()), record.data.size()) == records[i]);
      ++i;
    }
    CHECK(status == ringfeed::TFRecordReader::Status::kEnd);
    CHECK(i == records.size());
  }
  // The listing is the source's; the stats file is not listed.
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(mount.path(""))) {
    names.insert(entry.path().filename().string());
  }
  CHECK(names == std::set<std::string>{"part-0.tfrecord", "part-1.tfrecord.gz", "sub"});
  CHECK(std::filesystem::is_directory(mount.path("sub")));
  CHECK_FALSE(std::filesystem::exists(mount.path("missing")));

  // Counters: reads and bytes only of data files; SIGUSR1 resets them.
  nlohmann::json stats = mount.Stats();
  INFO(stats.dump());
  CHECK(Counter(stats, "reads") > 0);
  CHECK(Counter(stats, "bytes") >= std::filesystem::file_size(source.path() / "part-0.tfrecord"));
  CHECK(Counter(stats, "max_request_bytes") <= kMiB);
  CHECK(Counter(stats, "in_flight") == 0);
  CHECK(stats.at("latency_ms").get<double>() == 0.1);
  REQUIRE(::kill(mount.pid(), SIGUSR1) == 0);
  bool reset = false;
  const auto deadline = Clock::now() + kEventually;
  while (!reset && Clock::now() < deadline) {
    stats = mount.Stats();
    reset = Counter(stats, "resets") == 1;
    if (!reset) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(reset);
  CHECK(Counter(stats, "reads") == 0);
  CHECK(Counter(stats, "bytes") == 0);

  // At unmount slowfs prints its counters.
  ReadAll(mount.path("sub/raw.bin").string(), kMiB);
  const std::string log = mount.Unmount();
  INFO(log);
  CHECK(mount.exit_status() == 0);  // a clean exit on SIGTERM (and no sanitizer report)
  CHECK(log.find("slowfs: unmounted") != std::string::npos);
  CHECK(log.find("\"bytes\":100000") != std::string::npos);
}

TEST_CASE("slowfs: a 1 MiB read costs one latency, whatever the alignment of its buffer") {
  TempDir source;
  const std::string content = RandomBytes(16 * kMiB, 1);
  WriteFile(source.file("big.bin"), content);
  SlowMount mount(source.path().string(), {"--latency-ms=20"});
  if (!mount.mounted()) return mount.PrintSkip();

  int fd = ::open(mount.path("big.bin").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::unique_ptr<char, decltype(&std::free)> memory(static_cast<char*>(std::aligned_alloc(4096, 6 * kMiB)),
                                                      &std::free);
  REQUIRE(memory != nullptr);
  char* const aligned = memory.get();
  char* const unaligned = memory.get() + 512;  // spans 257 pages: the kernel sends 2 requests
  auto read_ten = [&](char* buffer) {
    const auto start = Clock::now();
    for (size_t i = 0; i < 10; ++i) {
      REQUIRE(::pread(fd, buffer, kMiB, static_cast<off_t>(i * kMiB)) == static_cast<ssize_t>(kMiB));
      REQUIRE(std::memcmp(buffer, content.data() + i * kMiB, kMiB) == 0);
    }
    return SecondsSince(start);
  };

  nlohmann::json before = mount.Stats();
  const double aligned_s = read_ten(aligned);
  nlohmann::json after = mount.Stats();
  INFO(after.dump() << " ten aligned 1 MiB reads: " << aligned_s << " s");
  std::printf("slowfs_test: 10 sequential 1 MiB reads at 20 ms, aligned buffer: %.3f s\n", aligned_s);
  CHECK(aligned_s >= 10 * 0.020);
  CHECK(Counter(after, "reads") - Counter(before, "reads") == 10);
  CHECK(Counter(after, "requests") - Counter(before, "requests") == 10);
  CHECK(Counter(after, "max_request_bytes") == kMiB);
  CHECK(Counter(after, "in_flight_max") == 1);

  before = after;
  const double unaligned_s = read_ten(unaligned);
  after = mount.Stats();
  INFO(after.dump() << " ten unaligned 1 MiB reads: " << unaligned_s << " s");
  std::printf("slowfs_test: 10 sequential 1 MiB reads at 20 ms, unaligned buffer: %.3f s\n", unaligned_s);
  CHECK(unaligned_s >= 10 * 0.020);
  CHECK(Counter(after, "reads") - Counter(before, "reads") == 10);  // the tails paid no latency
  CHECK(Counter(after, "requests") - Counter(before, "requests") == 20);

  // A 4 MiB read is four 1 MiB reads one after the other (five requests when unaligned).
  before = after;
  auto start = Clock::now();
  REQUIRE(::pread(fd, unaligned, 4 * kMiB, 0) == static_cast<ssize_t>(4 * kMiB));
  const double four_mib_s = SecondsSince(start);
  after = mount.Stats();
  std::printf("slowfs_test: one 4 MiB read at 20 ms: %.3f s\n", four_mib_s);
  CHECK(four_mib_s >= 4 * 0.020);
  CHECK(Counter(after, "reads") - Counter(before, "reads") == 4);
  CHECK(std::memcmp(unaligned, content.data(), 4 * kMiB) == 0);

  // Reads at the end of the file are free and not counted.
  before = after;
  start = Clock::now();
  CHECK(::pread(fd, aligned, kMiB, static_cast<off_t>(16 * kMiB)) == 0);
  CHECK(SecondsSince(start) < 5.0);
  CHECK(Counter(mount.Stats(), "requests") == Counter(before, "requests"));
  ::close(fd);
}

TEST_CASE("slowfs: --tail-fraction of the reads pay --tail-latency-ms more (stragglers)") {
  TempDir source;
  const std::string content = RandomBytes(40 * 64 * 1024, 3);
  WriteFile(source.file("f.bin"), content);
  SlowMount mount(source.path().string(), {"--latency-ms=1", "--tail-latency-ms=30", "--tail-fraction=0.25"});
  if (!mount.mounted()) return mount.PrintSkip();
  int fd = ::open(mount.path("f.bin").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::string buffer(64 * 1024, '\0');
  const auto start = Clock::now();
  for (size_t i = 0; i < 40; ++i) {
    REQUIRE(::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(i * buffer.size())) ==
            static_cast<ssize_t>(buffer.size()));
    REQUIRE(buffer == content.substr(i * buffer.size(), buffer.size()));
  }
  const double seconds = SecondsSince(start);
  ::close(fd);
  const nlohmann::json stats = mount.Stats();
  INFO(stats.dump() << " 40 reads: " << seconds << " s");
  CHECK(Counter(stats, "reads") == 40);
  // A quarter of 40, give or take what a hash of the request numbers spreads.
  const uint64_t stragglers = Counter(stats, "tail_reads");
  CHECK(stragglers >= 4);
  CHECK(stragglers <= 18);
  CHECK(seconds >= 40 * 0.001 + static_cast<double>(stragglers) * 0.030);
  CHECK(stats.at("tail_latency_ms").get<double>() == 30);
  CHECK(stats.at("tail_fraction").get<double>() == 0.25);
}

TEST_CASE("ReadQueue: a read far later than the usual round trip is sent again, and the first answer taken") {
  // 64 blocks of 64 KiB at 5 ms a read, 3% of the reads 300 ms more. Without hedged reads each
  // straggler the reader reaches stops it for up to 300 ms; with them for ~2 x the mean round
  // trip plus one more read. (Stragglers closer together than their delay hold both spare
  // blocks, ReadQueue::kMaxSpareBlocks; the third is waited out.)
  constexpr size_t kBlock = 64 * 1024, kBlocks = 64;
  TempDir source;
  const std::string content = RandomBytes(kBlock * kBlocks, 4);
  WriteFile(source.file("f.bin"), content);
  SlowMount plain(source.path().string(), {"--latency-ms=5"});
  if (!plain.mounted()) return plain.PrintSkip();
  if (!QueuedReadsOrSkip()) return;
  std::string why;
  ringfeed::ReadQueue::ResetHedgeBudget();  // not what the other cases' storage taught it
  // The same reads without stragglers, on this machine now (a sanitizer build, a busy machine
  // take longer): what the stragglers' time is measured against.
  double plain_seconds = 0;
  {
    int plain_fd = ::open(plain.path("f.bin").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(plain_fd >= 0);
    const auto start = Clock::now();
    auto q = ringfeed::ReadQueue::Create(plain_fd, 0, content.size(), kBlock, 4, &why);
    REQUIRE(q != nullptr);
    std::string buffer(10000, '\0');
    while (q->Read(reinterpret_cast<uint8_t*>(buffer.data()), buffer.size()) > 0) {
    }
    plain_seconds = SecondsSince(start);
    q.reset();
    ::close(plain_fd);
  }
  // The stragglers' delay: 300 ms, or more where a busy machine (a CI run beside other work)
  // makes the 5 ms reads' round trip so long that 300 ms is no longer "far later" (kHedgeFactor
  // times it): the hedges would then rightly not be sent. A failure here failed so once.
  const double round_trip_s = static_cast<double>(ringfeed::ReadQueue::MeanRoundTripNs()) / 1e9;
  const int tail_ms = std::max(300, static_cast<int>(10 * round_trip_s * 1000));
  SlowMount mount(source.path().string(), {"--latency-ms=5", "--tail-latency-ms=" + std::to_string(tail_ms),
                                           "--tail-fraction=0.03"});
  if (!mount.mounted()) return mount.PrintSkip();
  int fd = ::open(mount.path("f.bin").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::string got;
  uint64_t sent = 0, won = 0;
  double seconds = 0, destroy_seconds = 0;
  {
    auto start = Clock::now();
    auto q = ringfeed::ReadQueue::Create(fd, 0, content.size(), kBlock, 4, &why);
    REQUIRE(q != nullptr);
    std::string buffer(10000, '\0');  // reads that straddle blocks
    while (true) {
      const ssize_t n = q->Read(reinterpret_cast<uint8_t*>(buffer.data()), buffer.size());
      REQUIRE(n >= 0);
      if (n == 0) break;
      got.append(buffer.data(), static_cast<size_t>(n));
    }
    seconds = SecondsSince(start);
    sent = q->hedges_sent();
    won = q->hedges_won();
    CHECK(q->spare_blocks() <= ringfeed::ReadQueue::kMaxSpareBlocks);
    start = Clock::now();
    q.reset();  // the hedges' losers, still in flight, are left to a thread of their own
    destroy_seconds = SecondsSince(start);
  }
  ::close(fd);
  // slowfs counts a straggler once it is answered: wait for the losers (closing the fd did not
  // cut them short: the queue's ring holds the file).
  nlohmann::json stats = mount.Stats();
  for (int i = 0; i < 200 && Counter(stats, "in_flight") > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    stats = mount.Stats();
  }
  INFO(stats.dump() << "; " << seconds << " s, hedges sent " << sent << ", won " << won);
  CHECK(Counter(stats, "reads") >= kBlocks);
  // ... and the thread that waited for them has ended (with its ring: no fd left open).
  auto reapers = [] {
    int n = 0;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      std::getline(comm, name);
      n += name == "rf-read-reap";
    }
    return n;
  };
  for (int i = 0; i < 200 && reapers() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(reapers() == 0);
  std::printf("slowfs_test: 64 reads at 5 ms with 3%% at %d ms more: %.3f s (without stragglers %.3f s; +%.3f s "
              "to destroy the queue), %llu stragglers, hedges sent %llu, won %llu\n",
              tail_ms, seconds, plain_seconds, destroy_seconds,
              static_cast<unsigned long long>(Counter(stats, "tail_reads")),
              static_cast<unsigned long long>(sent), static_cast<unsigned long long>(won));
  CHECK(got == content);
  const uint64_t stragglers = Counter(stats, "tail_reads");
  REQUIRE(stragglers >= 2);  // the pattern is fixed (a hash of the request numbers)
  CHECK(won >= 1);
  CHECK(sent >= won);
  CHECK(sent <= stragglers + 2);  // only late reads are sent again
  // Well under waiting them out (300 ms each): ~2 round trips per straggler whose hedge won; a
  // hedge that did not win (it was a straggler too, or sent for a read merely slow) may cost one.
  const double hedge_won_s = std::max(0.1, 4 * round_trip_s), hedge_lost_s = tail_ms / 1000.0 + 0.05;
  CHECK(seconds <
        plain_seconds + static_cast<double>(won) * hedge_won_s + static_cast<double>(sent - won) * hedge_lost_s);
  CHECK(destroy_seconds < 0.1);  // not a straggler's 300 ms
}

TEST_CASE("ReadQueue: a read answered while nobody waited is not sent again, however long ago it was sent") {
  // A file opened ahead of its turn: its first block is read at once and taken much later.
  TempDir source;
  const std::string content = RandomBytes(4 * 64 * 1024, 5);
  WriteFile(source.file("f.bin"), content);
  SlowMount mount(source.path().string(), {"--latency-ms=5"});
  if (!mount.mounted()) return mount.PrintSkip();
  if (!QueuedReadsOrSkip()) return;
  std::string why;
  int fd = ::open(mount.path("f.bin").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  {
    auto warm = ringfeed::ReadQueue::Create(fd, 0, content.size(), 64 * 1024, 2, &why);  // a mean round trip
    REQUIRE(warm != nullptr);
    uint8_t byte = 0;
    REQUIRE(warm->Read(&byte, 1) == 1);
  }
  auto q = ringfeed::ReadQueue::Create(fd, 0, content.size(), 64 * 1024, 4, &why, /*allowance=*/1);
  REQUIRE(q != nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // 40x the round trip
  std::string got(content.size(), '\0');
  size_t at = 0;
  while (at < got.size()) {
    const ssize_t n = q->Read(reinterpret_cast<uint8_t*>(got.data()) + at, got.size() - at);
    REQUIRE(n > 0);
    at += static_cast<size_t>(n);
    // Taken slowly: every block is answered long before the reader comes to it (a read waited
    // for longer than 2x the mean round trip would be sent again: 100 ms leaves room for a slow,
    // sanitized, busy run).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    q->SetAllowance(4);
  }
  CHECK(got == content);
  CHECK(q->hedges_sent() == 0);
  q.reset();
  ::close(fd);
}

TEST_CASE("ReadQueue: a hedged read that comes back short (the file was cut) is not sent again") {
  // Every read on `slow` takes 500 ms; slowfs reads the source first, so the read in flight has
  // the bytes, and a hedge sent after the source is truncated finds the end of the file at once.
  TempDir fast_source, slow_source;
  const std::string content = RandomBytes(64 * 1024, 6);
  WriteFile(fast_source.file("warm.bin"), content);
  WriteFile(slow_source.file("f.bin"), content);
  SlowMount fast(fast_source.path().string(), {"--latency-ms=5"});
  if (!fast.mounted()) return fast.PrintSkip();
  SlowMount slow(slow_source.path().string(), {"--latency-ms=1", "--tail-latency-ms=500", "--tail-fraction=1"});
  if (!slow.mounted()) return slow.PrintSkip();
  if (!QueuedReadsOrSkip()) return;
  std::string why;
  {  // the process's mean round trip: ~5 ms
    int warm_fd = ::open(fast.path("warm.bin").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(warm_fd >= 0);
    auto warm = ringfeed::ReadQueue::Create(warm_fd, 0, content.size(), 16 * 1024, 2, &why);
    REQUIRE(warm != nullptr);
    std::string all(content.size(), '\0');
    size_t at = 0;
    while (at < all.size()) at += static_cast<size_t>(warm->Read(reinterpret_cast<uint8_t*>(all.data()) + at, all.size() - at));
    warm.reset();
    ::close(warm_fd);
  }
  REQUIRE(ringfeed::ReadQueue::MeanRoundTripNs() < 100'000'000);
  ringfeed::ReadQueue::ResetHedgeBudget();
  int fd = ::open(slow.path("f.bin").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  auto q = ringfeed::ReadQueue::Create(fd, 0, content.size(), content.size(), 2, &why);
  REQUIRE(q != nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // slowfs has read the source
  std::filesystem::resize_file(slow_source.path() / "f.bin", 0);
  std::string got(content.size(), '\0');
  const ssize_t n = q->Read(reinterpret_cast<uint8_t*>(got.data()), got.size());
  CHECK(n == static_cast<ssize_t>(content.size()));  // the read in flight brought the bytes
  CHECK(got == content);
  CHECK(q->hedges_sent() == 1);  // not one after another until that read landed
  CHECK(q->hedges_won() == 0);
  q.reset();
  ::close(fd);
}

namespace {

// What ReadThroughQueues saw: the hedges sent and won over all the files, and the first thing
// that went wrong ("" if none). It runs on threads of its own: no Catch2 macro inside (they are
// not thread-safe); the caller checks `failure`.
struct QueuedReads {
  uint64_t sent = 0, won = 0;
  std::string failure;
};

// Reads every file in `paths` in turn through a ReadQueue (`reads` in flight, `block` bytes each,
// `hedge` as Create's) and compares the bytes with `content`.
QueuedReads ReadThroughQueues(const std::vector<std::string>& paths, const std::string& content, size_t block,
                              size_t reads, bool hedge) {
  QueuedReads out;
  for (const std::string& path : paths) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {out.sent, out.won, path + ": open failed"};
    std::string why;
    auto q = ringfeed::ReadQueue::Create(fd, 0, content.size(), block, reads + 1, &why, SIZE_MAX, hedge);
    if (q == nullptr) {
      ::close(fd);
      return {out.sent, out.won, path + ": no queue: " + why};
    }
    std::string got(content.size(), '\0');
    size_t at = 0;
    while (at < got.size()) {
      const ssize_t n = q->Read(reinterpret_cast<uint8_t*>(got.data()) + at, std::min<size_t>(10000, got.size() - at));
      if (n <= 0) {
        out.failure = path + ": read returned " + std::to_string(n) + " at byte " + std::to_string(at);
        break;
      }
      at += static_cast<size_t>(n);
    }
    if (out.failure.empty() && got != content) out.failure = path + ": bytes differ";
    out.sent += q->hedges_sent();
    out.won += q->hedges_won();
    q.reset();
    ::close(fd);
    if (!out.failure.empty()) break;
  }
  return out;
}

}  // namespace

TEST_CASE("ReadQueue: a read that fails while its hedge is in flight (a straggler timed out) leaves the block to the "
          "hedge") {
  // slowfs --tail-error: a straggler answers EIO after its delay, as gcsfuse and s3fs answer a
  // request that timed out. Stragglers are picked by a hash of the request's number: at
  // --tail-fraction=0.12, requests 0-2 are not, 3 is, 4 is not. Every read on `slow` takes
  // 100 ms; the usual round trip is made ~20 ms first, so the hedge of request 3 (request 4)
  // goes at ~40 ms and answers at ~140 ms, after request 3's EIO at ~100 ms.
  TempDir warm_source, slow_source;
  const std::string warm_content = RandomBytes(48 * 4096, 8);
  const std::string content = RandomBytes(64 * 1024, 9);
  WriteFile(warm_source.file("warm.bin"), warm_content);
  WriteFile(slow_source.file("first.bin"), RandomBytes(3 * 4096, 10));
  WriteFile(slow_source.file("f.bin"), content);
  SlowMount warm20(warm_source.path().string(), {"--latency-ms=20"});
  if (!warm20.mounted()) return warm20.PrintSkip();
  SlowMount warm5(warm_source.path().string(), {"--latency-ms=5"});
  if (!warm5.mounted()) return warm5.PrintSkip();
  SlowMount slow(slow_source.path().string(),
                 {"--latency-ms=100", "--tail-latency-ms=0.01", "--tail-fraction=0.12", "--tail-error"});
  if (!slow.mounted()) return slow.PrintSkip();
  if (!QueuedReadsOrSkip()) return;
  // The mean round trip towards 20 ms (it moves 1/16 of the way per read it counts).
  const QueuedReads warmed = ReadThroughQueues({warm20.path("warm.bin"), warm20.path("warm.bin")}, warm_content,
                                               4096, 1, /*hedge=*/false);
  REQUIRE(warmed.failure.empty());
  const int64_t mean = ringfeed::ReadQueue::MeanRoundTripNs();
  INFO("mean round trip " << mean / 1e6 << " ms");
  REQUIRE(mean >= 12'000'000);
  REQUIRE(mean <= 30'000'000);
  // Requests 0-2 of `slow`: three plain reads (the mount is direct_io: one request each).
  {
    const int fd = ::open(slow.path("first.bin").c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::string page(4096, '\0');
    for (int i = 0; i < 3; ++i) CHECK(::pread(fd, page.data(), page.size(), i * 4096) == 4096);
    ::close(fd);
  }
  ringfeed::ReadQueue::ResetHedgeBudget();
  std::string why;
  const int fd = ::open(slow.path("f.bin").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  auto q = ringfeed::ReadQueue::Create(fd, 0, content.size(), content.size(), 2, &why);
  REQUIRE(q != nullptr);
  std::string got(content.size(), '\0');
  const ssize_t n = q->Read(reinterpret_cast<uint8_t*>(got.data()), got.size());
  INFO("errno " << (n < 0 ? std::strerror(errno) : "-"));
  CHECK(n == static_cast<ssize_t>(content.size()));  // the hedge's bytes, not the straggler's EIO
  const bool same = got == content;
  CHECK(same);
  CHECK(q->hedges_sent() == 1);
  q.reset();
  ::close(fd);
  const nlohmann::json stats = slow.Stats();
  CHECK(stats.at("tail_reads").get<uint64_t>() == 1);  // request 3, and only it, was a straggler
  CHECK(stats.at("reads").get<uint64_t>() == 5);
  // The mean back near 5 ms for the cases after this one.
  CHECK(ReadThroughQueues({warm5.path("warm.bin")}, warm_content, 4096, 1, false).failure.empty());
}

TEST_CASE("ReadQueue: under a bandwidth cap hedges do not answer first, and stop after a few") {
  // 1 ms a read but 40 MB/s for the whole mount, 4 readers each reading 8 files in turn: the
  // reads queue behind the cap, and a file's first reads behind the other files' (the oldest
  // read is late by the others' queue while the mean round trip is still learning it: not a
  // straggler), so its hedge queues behind the same cap and loses. Without HedgeBudget 7-8 are
  // sent here; with it, kTokens in all (plus two for each that won).
  constexpr int kReaders = 4, kFilesEach = 8;
  TempDir source;
  const std::string content = RandomBytes(1 * kMiB, 7);
  for (int f = 0; f < kReaders * kFilesEach; ++f) WriteFile(source.file("f" + std::to_string(f) + ".bin"), content);
  SlowMount mount(source.path().string(), {"--latency-ms=1", "--bandwidth-mbps=40"});
  if (!mount.mounted()) return mount.PrintSkip();
  if (!QueuedReadsOrSkip()) return;
  ringfeed::ReadQueue::ResetHedgeBudget();
  std::vector<QueuedReads> counts(kReaders);
  const auto start = Clock::now();
  {
    std::vector<std::thread> readers;
    for (int r = 0; r < kReaders; ++r) {
      readers.emplace_back([&, r] {
        std::vector<std::string> paths;
        for (int f = 0; f < kFilesEach; ++f) paths.push_back(mount.path("f" + std::to_string(r * kFilesEach + f) + ".bin"));
        counts[r] = ReadThroughQueues(paths, content, 64 * 1024, 16, /*hedge=*/true);
      });
    }
    for (std::thread& t : readers) t.join();
  }
  const double seconds = SecondsSince(start);
  uint64_t sent = 0, won = 0;
  for (const QueuedReads& c : counts) {
    CHECK(c.failure == "");
    sent += c.sent;
    won += c.won;
  }
  std::printf("slowfs_test: 32 MiB at 40 MB/s by 4 readers, queues of 16 reads: %.2f s, hedges sent %llu, won %llu%s\n",
              seconds, static_cast<unsigned long long>(sent), static_cast<unsigned long long>(won),
              ringfeed::ReadQueue::HedgesPaused() ? " (paused)" : "");
  INFO(seconds << " s; hedges sent " << sent << ", won " << won);
  REQUIRE(seconds < 10);  // no token came back meanwhile (HedgeBudget::kRefillNs)
  CHECK(sent >= 1);  // late reads there were: the rule below is not idle
  // Each won hedge earns two more; the rest are at most the budget's tokens.
  CHECK(sent <= static_cast<uint64_t>(ringfeed::HedgeBudget::kTokens) + 2 * won);
  ringfeed::ReadQueue::ResetHedgeBudget();
}

TEST_CASE("ReadQueue: with hedging off (Create's hedge = false) a straggler is waited out, never sent again") {
  TempDir source;
  const std::string content = RandomBytes(64 * 64 * 1024, 8);
  WriteFile(source.file("f.bin"), content);
  SlowMount mount(source.path().string(), {"--latency-ms=5", "--tail-latency-ms=100", "--tail-fraction=0.05"});
  if (!mount.mounted()) return mount.PrintSkip();
  if (!QueuedReadsOrSkip()) return;
  ringfeed::ReadQueue::ResetHedgeBudget();
  const uint64_t total_before = ringfeed::ReadQueue::TotalHedgesSent();
  const QueuedReads reads = ReadThroughQueues({mount.path("f.bin")}, content, 64 * 1024, 3, /*hedge=*/false);
  CHECK(reads.failure == "");
  CHECK(reads.sent == 0);
  CHECK(reads.won == 0);
  CHECK(ringfeed::ReadQueue::TotalHedgesSent() == total_before);
  CHECK(Counter(mount.Stats(), "tail_reads") >= 2);  // there were stragglers to hedge
}

TEST_CASE("TFRecordReader: a GZIP file on slow storage is read with its reads in flight together") {
  // The inflater reads its compressed bytes through a ReadQueue: slowfs sees up to 8 reads of
  // 64 KiB at once instead of one read() at a time, and the records come out intact.
  std::vector<std::string> records;
  for (int i = 0; i < 2000; ++i) records.push_back(RandomBytes(static_cast<size_t>(500 + i % 700), 100 + i));
  TempDir source;
  const std::string gz = ringfeed::testing::GzipBytes(ringfeed::testing::FrameRecords(records));
  REQUIRE(gz.size() > 16 * 64 * 1024);  // random payloads do not compress: many blocks
  WriteFile(source.file("f.tfrecord.gz"), gz);
  SlowMount mount(source.path().string(), {"--latency-ms=10"});
  if (!mount.mounted()) return mount.PrintSkip();
  if (!QueuedReadsOrSkip()) return;
  for (const size_t reads : {size_t{1}, size_t{8}}) {
    INFO(reads << " reads in flight");
    const uint64_t requests_before = Counter(mount.Stats(), "requests");
    ringfeed::ReaderOptions options;
    options.reads_in_flight = reads;
    options.read_block_bytes = 64 * 1024;
    options.buffer_bytes = 64 * 1024;
    ringfeed::TFRecordReader reader(mount.path("f.tfrecord.gz"), options);
    ringfeed::Record record;
    ringfeed::ReadError error;
    size_t i = 0;
    for (; reader.Next(&record, &error) == ringfeed::TFRecordReader::Status::kRecord; ++i) {
      REQUIRE(i < records.size());
      CHECK(std::string(record.data.begin(), record.data.end()) == records[i]);
    }
    CHECK(i == records.size());
    CHECK(reader.compression() == ringfeed::Compression::kGzip);
    CHECK(reader.reads_in_flight() == 1);  // the file is over: its queue is gone
    const nlohmann::json stats = mount.Stats();
    CHECK(Counter(stats, "requests") > requests_before);
    if (reads == 1) {
      CHECK(Counter(stats, "in_flight_max") == 1);
    } else {
      CHECK(Counter(stats, "in_flight_max") >= 4);
    }
  }
}

TEST_CASE("TFRecordReader: reads in flight changed mid-file are not read twice (the queue changes depth in place)") {
  // The autotuner raises and takes back reads_per_file while files are being read. Between
  // numbers above 1 the queue keeps what it read ahead and its reads in flight: slowfs serves
  // each byte once, as many as with the reads in flight never changed.
  std::vector<std::string> records;
  for (int i = 0; i < 3000; ++i) records.push_back(RandomBytes(static_cast<size_t>(300 + i % 900), 7 + i));
  TempDir source;
  const std::string framed = ringfeed::testing::FrameRecords(records);
  WriteFile(source.file("p.tfrecord"), framed);
  WriteFile(source.file("g.tfrecord.gz"), ringfeed::testing::GzipBytes(framed));
  SlowMount mount(source.path().string(), {"--latency-ms=2"});
  if (!mount.mounted()) return mount.PrintSkip();
  if (!QueuedReadsOrSkip()) return;
  for (const char* file : {"p.tfrecord", "g.tfrecord.gz"}) {
    uint64_t served_fixed = 0;
    for (const bool change : {false, true}) {
      INFO(file << (change ? ", reads in flight 2 -> 8 -> 16 -> 3 -> 12 -> 2" : ", 8 reads in flight throughout"));
      const uint64_t bytes_before = Counter(mount.Stats(), "bytes");
      ringfeed::ReaderOptions options;
      options.reads_in_flight = change ? 2 : 8;
      options.read_block_bytes = 16 * 1024;
      options.hedged_reads = false;  // a hedge reads a block twice on purpose
      ringfeed::TFRecordReader reader(mount.path(file), options);
      const size_t steps[] = {8, 16, 3, 12, 2};
      ringfeed::Record record;
      ringfeed::ReadError error;
      size_t i = 0;
      for (; reader.Next(&record, &error) == ringfeed::TFRecordReader::Status::kRecord; ++i) {
        REQUIRE(i < records.size());
        REQUIRE(std::string(record.data.begin(), record.data.end()) == records[i]);
        if (change && i % 500 == 250 && i / 500 < std::size(steps)) {
          reader.SetReadsInFlight(steps[i / 500]);
          CHECK(reader.reads_in_flight() == steps[i / 500]);
        }
      }
      CHECK(error.message.empty());
      CHECK(i == records.size());
      const uint64_t served = Counter(mount.Stats(), "bytes") - bytes_before;
      CHECK(served >= std::filesystem::file_size(source.file(file)));
      if (!change) {
        served_fixed = served;
      } else {
        CHECK(served == served_fixed);
      }
    }
  }
}

TEST_CASE("slowfs: a tail fraction above 1, or --tail-error without stragglers, is refused (exit 2) before mounting") {
  const auto [options, message] = GENERATE(table<std::string, std::string>(
      {{"--tail-latency-ms=10 --tail-fraction=1.5", "--tail-fraction: give a fraction from 0 to 1"},
       {"--tail-error", "--tail-error needs --tail-fraction"}}));
  TempDir source;
  std::filesystem::create_directory(source.path() / "mnt");
  const std::string command = std::string(RINGFEED_SLOWFS_BIN) + " " + source.path().string() + " " +
                              (source.path() / "mnt").string() + " " + options + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char chunk[256];
  while (size_t n = std::fread(chunk, 1, sizeof chunk, pipe)) output.append(chunk, n);
  const int status = ::pclose(pipe);
  INFO(output);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(output.find(message) != std::string::npos);
}

TEST_CASE("slowfs: parallel readers overlap their latencies") {
  constexpr int kReaders = 8;
  constexpr int kReadsEach = 4;
  TempDir source;
  for (int r = 0; r < kReaders; ++r) {
    WriteFile(source.file("f" + std::to_string(r)), RandomBytes(kReadsEach * kMiB, static_cast<uint32_t>(r)));
  }
  SlowMount mount(source.path().string(), {"--latency-ms=50"});
  if (!mount.mounted()) return mount.PrintSkip();

  auto start = Clock::now();
  REQUIRE(ReadAll(mount.path("f0").string(), kMiB) == kReadsEach * kMiB);
  const double one_reader_s = SecondsSince(start);
  CHECK(one_reader_s >= kReadsEach * 0.050);

  std::vector<size_t> got(kReaders);
  std::vector<std::thread> readers;
  start = Clock::now();
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] { got[r] = ReadAll(mount.path("f" + std::to_string(r)).string(), kMiB); });
  }
  for (auto& t : readers) t.join();
  const double parallel_s = SecondsSince(start);
  nlohmann::json stats = mount.Stats();
  INFO(stats.dump() << " one reader " << one_reader_s << " s, " << kReaders << " readers " << parallel_s << " s");
  std::printf("slowfs_test: %d x 4 MiB at 50 ms: one reader %.3f s, %d parallel readers %.3f s (in flight max %d)\n",
              kReaders, one_reader_s, kReaders, parallel_s, stats.at("in_flight_max").get<int>());
  for (int r = 0; r < kReaders; ++r) CHECK(got[r] == kReadsEach * kMiB);
  CHECK(parallel_s < 0.6 * kReaders * one_reader_s);
  CHECK(Counter(stats, "in_flight_max") >= 2);
}

TEST_CASE("slowfs: the bandwidth cap holds for all readers together") {
  constexpr int kReaders = 4;
  constexpr size_t kBytesEach = 5'000'000;  // 20 MB in all, at 20 MB/s: 1 s
  TempDir source;
  for (int r = 0; r < kReaders; ++r) {
    WriteFile(source.file("f" + std::to_string(r)), RandomBytes(kBytesEach, static_cast<uint32_t>(r)));
  }
  SlowMount mount(source.path().string(), {"--bandwidth-mbps=20"});
  if (!mount.mounted()) return mount.PrintSkip();

  std::vector<size_t> got(kReaders);
  std::vector<std::thread> readers;
  auto start = Clock::now();
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] { got[r] = ReadAll(mount.path("f" + std::to_string(r)).string(), kMiB); });
  }
  for (auto& t : readers) t.join();
  const double seconds = SecondsSince(start);
  nlohmann::json stats = mount.Stats();
  INFO(stats.dump() << " 20 MB in " << seconds << " s");
  std::printf("slowfs_test: 20 MB by %d readers at 20 MB/s: %.3f s\n", kReaders, seconds);
  for (int r = 0; r < kReaders; ++r) CHECK(got[r] == kBytesEach);
  CHECK(seconds >= 0.8);
  CHECK(Counter(stats, "bytes") == kReaders * kBytesEach);
}

TEST_CASE("slowfs: every write fails with EROFS and the source stays as it was") {
  TempDir source;
  WriteFile(source.file("data.bin"), "original");
  SlowMount mount(source.path().string(), {});
  if (!mount.mounted()) return mount.PrintSkip();

  const std::string file = mount.path("data.bin").string();
  const std::string fresh = mount.path("new.bin").string();
  auto erofs = [](int rc) { return rc < 0 && errno == EROFS; };
  CHECK(erofs(::open(file.c_str(), O_WRONLY)));
  CHECK(erofs(::open(file.c_str(), O_RDWR)));
  CHECK(erofs(::open(fresh.c_str(), O_WRONLY | O_CREAT, 0644)));
  CHECK(erofs(::truncate(file.c_str(), 0)));
  CHECK(erofs(::unlink(file.c_str())));
  CHECK(erofs(::rename(file.c_str(), fresh.c_str())));
  CHECK(erofs(::mkdir(mount.path("dir").c_str(), 0755)));
  CHECK(erofs(::symlink("data.bin", fresh.c_str())));
  CHECK(erofs(::chmod(file.c_str(), 0600)));
  CHECK(erofs(::open(mount.StatsPath().c_str(), O_WRONLY)));
  CHECK(ReadFile(file) == "original");
  CHECK(ReadFile(source.file("data.bin")) == "original");
  CHECK_FALSE(std::filesystem::exists(source.path() / "new.bin"));
}
