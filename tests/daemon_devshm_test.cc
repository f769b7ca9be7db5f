// ringfeedd with a /dev/shm too small for its ring: the daemon runs in a private mount
// namespace (unshare -m --map-root-user) with a 64 MiB tmpfs over /dev/shm and a ring of
// 4 x 128 MiB; it must refuse to start with an exit status (not die of SIGBUS later) and an
// error naming both sizes. Skipped ("RINGFEED_SKIP:"; a failure with CI=true) where the
// namespace cannot be made; its own program, so that a skip hides no other test.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "format/example_builder.h"
#include "format/tfrecord_writer.h"
#include "tests/daemon_harness.h"
#include "tests/test_support.h"

using namespace ringfeed;
using namespace ringfeed::testing;

namespace {

const std::string kMount = "mount -t tmpfs -o size=64m tmpfs /dev/shm";

// Whether a private mount namespace with a 64 MiB tmpfs over /dev/shm (kMount) can be made
// here; SkipOrFail with why when not.
bool PrivateShmWorks() {
  const CommandResult probe = RunCommand({"/usr/bin/unshare", "-m", "--map-root-user", "/bin/sh", "-c", kMount});
  if (probe.status.exited && probe.status.code == 0) return true;
  SkipOrFail("cannot mount a private /dev/shm (unshare -m --map-root-user: " + probe.status.ToString() + ": " +
             probe.err + ")");
  return false;
}

// The wrapper that starts ringfeedd in such a namespace (DaemonStart::wrapper).
std::vector<std::string> InPrivateShm() {
  return {"unshare", "-m", "--map-root-user", "sh", "-c", kMount + " && exec \"$0\" \"$@\""};
}

}  // namespace

TEST_CASE("/dev/shm too small for the ring: a clear start-up error, not SIGBUS") {
  if (!PrivateShmWorks()) return;
  TempDir dir;
  WriteIdFile(dir.file("data.tfrecord"), 0, 10);
  const std::string config = "job: small-shm\n"
                             "source: {files: [\"" + dir.file("data.tfrecord") + "\"]}\n"
                             "features:\n" + IdFeaturesYaml() +
                             "ring: {slots: 4, slot_bytes: 128MiB}\n";
  DaemonProcess daemon(dir.path(), "small-shm", config);
  DaemonStart start;
  start.wrapper = InPrivateShm();
  CHECK_FALSE(daemon.Start(start));
  const auto status = daemon.Wait();
  REQUIRE(status);
  const std::string err = daemon.Stderr();
  INFO("stderr:\n" << err);
  CHECK(status->exited);  // an exit status, not a signal (SIGBUS)
  CHECK(status->code == 2);  // needs an operator: the systemd unit does not retry it
  CHECK_THAT(err, Catch::Contains("needs") && Catch::Contains("free"));
  CHECK_THAT(err, Catch::Contains("but /dev/shm has 67108864 bytes free"));  // the 64 MiB tmpfs, empty
}

TEST_CASE("/dev/shm too small for auto slots of the largest records: fewer prefetch slots, then the mean's") {
  if (!PrivateShmWorks()) return;
  // Every 8th record 3 MB: a batch of 8 of them needs 24 MB, a ring of those at least 120 MB.
  TempDir dir;
  {
    TFRecordWriter writer(dir.file("data.tfrecord"));
    const std::string big(3'000'000, 'b');
    for (int64_t i = 0; i < 64; ++i) {
      ExampleBuilder b;
      writer.Write(b.AddInt64("id", {i}).AddBytes("blob", {std::string_view(i % 8 == 0 ? big : "xy")}).Serialize());
    }
    writer.Close();
  }
  const std::string config = "job: small-shm-auto\n"
                             "source: {files: [\"" + dir.file("data.tfrecord") + "\"]}\n"
                             "features: {id: {dtype: int64}, blob: {dtype: bytes}}\n"
                             "batch: {size: 8}\nshuffle: {buffer: 64}\n";
  DaemonProcess daemon(dir.path(), "small-shm-auto", config);
  DaemonStart start;
  start.wrapper = InPrivateShm();
  INFO("stderr:\n" << daemon.Stderr());
  RINGFEED_REQUIRE_STARTED(daemon, start);
  CHECK(daemon.WaitForStderr("from the mean sampled record: a ring of slots for a batch of the largest sampled "
                             "records ("));
  CHECK(daemon.WaitForStderr("does not fit in /dev/shm (64.0 MiB free)"));
  CHECK(daemon.Stop().ToString() == "exit 0");
}
