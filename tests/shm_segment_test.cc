// shm::Segment: create/open/remove, permissions and group, replacing a stale segment, the
// "no such segment" message, removing a name only while it names the segment's file
// (shm/file_id.h), and a /dev/shm too small for the ring (a private mount namespace
// with a 64 MiB tmpfs on /dev/shm): an error naming the bytes needed and free, never SIGBUS.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shm/file_id.h"
#include "shm/names.h"
#include "shm/segment.h"
#include "tests/test_support.h"

namespace ringfeed {
namespace {

std::string UniqueName(const char* what) {
  return "/ringfeed.segtest-" + std::string(what) + "." + std::to_string(getpid());
}

struct RemoveOnExit {
  std::string name;
  ~RemoveOnExit() { shm::Segment::Remove(name); }
};

struct stat StatShm(const std::string& name) {
  struct stat st {};
  REQUIRE(stat(("/dev/shm" + name).c_str(), &st) == 0);
  return st;
}

// Runs a shell command; returns its exit status and output (stdout + stderr).
std::pair<int, std::string> Run(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  return {pclose(pipe), output};
}

TEST_CASE("Segment: create, open, remove; mode and group; stale segments are replaced") {
  const std::string name = UniqueName("basic");
  RemoveOnExit cleanup{name};
  {
    shm::Segment created = shm::Segment::Create(name, 3 * 4096);
    REQUIRE(created.valid());
    CHECK(created.size() == 3 * 4096);
    CHECK((StatShm(name).st_mode & 0777) == 0600);
    CHECK(StatShm(name).st_blocks * 512 >= 3 * 4096);  // reserved, not sparse
    created.data()[5000] = 42;

    shm::Segment opened = shm::Segment::Open(name);
    CHECK(opened.size() == 3 * 4096);
    CHECK(opened.data()[5000] == 42);  // the same memory
    CHECK(opened.name() == name);

    shm::Segment moved = std::move(opened);
    CHECK_FALSE(opened.valid());
    CHECK(moved.data()[5000] == 42);
  }
  {
    // A stale segment of the same name (a crashed daemon's) is replaced by a fresh, zeroed one.
    shm::Segment again = shm::Segment::Create(name, 2 * 4096);
    CHECK(again.size() == 2 * 4096);
    CHECK(again.data()[5000] == 0);
  }
  if (geteuid() == 0) {
    shm::Segment grouped = shm::Segment::Create(name, 4096, 0660, gid_t{4321});
    const struct stat st = StatShm(name);
    CHECK(st.st_gid == 4321);
    CHECK((st.st_mode & 0777) == 0660);
  }
  CHECK(shm::Segment::Remove(name));
  CHECK_FALSE(shm::Segment::Remove(name));
}

TEST_CASE("UnlinkIfSame removes the segment's name only while it names the segment's file") {
  const std::string name = UniqueName("same");
  RemoveOnExit cleanup{name};
  const std::string path = shm::Segment::Path(name);
  shm::Segment first = shm::Segment::Create(name, 4096);
  const struct stat st = StatShm(name);
  CHECK(first.file_id() == shm::FileId::Of(st));
  CHECK(shm::StateOf(path.c_str(), first.file_id()) == shm::PathState::kSame);
  // Replaced by another segment of that name (a second daemon for the job): left alone.
  shm::Segment second = shm::Segment::Create(name, 4096);
  shm::FileId now;
  CHECK(shm::StateOf(path.c_str(), first.file_id(), &now) == shm::PathState::kReplaced);
  CHECK(now == second.file_id());
  CHECK_FALSE(shm::UnlinkIfSame(path.c_str(), first.file_id()));
  CHECK(shm::Segment::Open(name).file_id() == second.file_id());
  CHECK_FALSE(shm::UnlinkIfSame(path.c_str(), shm::FileId{}));  // nothing recorded: nothing removed
  CHECK(shm::UnlinkIfSame(path.c_str(), second.file_id()));
  CHECK(shm::StateOf(path.c_str(), second.file_id()) == shm::PathState::kGone);
  CHECK_FALSE(shm::UnlinkIfSame(path.c_str(), second.file_id()));
}

TEST_CASE("Segment::Open of a missing segment says which job's daemon is not running") {
  const std::string name = shm::SegmentName("/nonexistent/ringfeed", "nojob");
  CHECK_THROWS_WITH(shm::Segment::Open(name),
                    "no ringfeed segment " + name + ": is ringfeedd running for job nojob?");
}

// Run by the next test inside `unshare -m` with a 64 MiB /dev/shm; hidden otherwise.
TEST_CASE("shm segment nospace helper", "[.nospace_helper]") {
  if (std::getenv("RINGFEED_NOSPACE_HELPER") == nullptr) return;
  const std::string name = "/ringfeed.nospace.0000000000000000";
  std::string message;
  try {
    shm::Segment::Create(name, uint64_t{256} << 20);
  } catch (const shm::ShmError& e) {
    message = e.what();
  }
  std::printf("NOSPACE_MESSAGE: %s\n", message.c_str());
  // The failed segment was removed.
  CHECK_THROWS_AS(shm::Segment::Open(name), shm::ShmError);
  // One that fits can be written completely (reserved: no SIGBUS).
  shm::Segment fits = shm::Segment::Create(name, uint64_t{48} << 20);
  std::memset(fits.data(), 0xab, fits.size());
  // Now 16 MiB are left: 32 MiB more must fail the same way.
  std::string second;
  try {
    shm::Segment::Create(name + "2", uint64_t{32} << 20);
  } catch (const shm::ShmError& e) {
    second = e.what();
  }
  std::printf("NOSPACE_SECOND: %s\n", second.c_str());
  std::printf("NOSPACE_DONE\n");
}

TEST_CASE("Segment::Create on a too small /dev/shm: an error with the bytes, never SIGBUS") {
  auto [probe, probe_output] = Run("unshare -m --map-root-user sh -c 'mount -t tmpfs -o size=64m tmpfs /dev/shm'");
  if (probe != 0) {
    ringfeed::testing::Skip("cannot mount a private /dev/shm (unshare -m --map-root-user): " + probe_output);
    return;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  self[n] = '\0';
  auto [status, output] = Run(std::string("RINGFEED_NOSPACE_HELPER=1 unshare -m --map-root-user sh -c "
                                          "'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec \"") +
                              self + "\" \"shm segment nospace helper\"'");
  INFO(output);
  REQUIRE(WIFEXITED(status));  // a SIGBUS would show as a signal
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(output, Catch::Contains("NOSPACE_DONE"));
  CHECK_THAT(output, Catch::Contains("NOSPACE_MESSAGE: shared memory: the ring needs 268435456 bytes (256.0 MiB) "
                                     "but /dev/shm has 67108864 bytes free; lower ring.slots or "
                                     "ring.slot_bytes, or enlarge /dev/shm (docker run --shm-size=...)"));
  CHECK_THAT(output, Catch::Contains("NOSPACE_SECOND: shared memory: the ring needs 33554432 bytes (32.0 MiB) "
                                     "but /dev/shm has 16777216 bytes free"));
}

}  // namespace
}  // namespace ringfeed
