// Helpers shared by the tests: temporary directories, building TFRecord files in every
// compression, and locating ../shared/data (skipping visibly where it is absent).
#pragma once

#include <sys/un.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "format/compression.h"

namespace ringfeed::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The address of the Unix socket at `path` (shorter than sizeof sun_path: checked by the caller,
// or by BindUnixSocket).
sockaddr_un UnixAddress(const std::string& path);
// A Unix socket of `type` (SOCK_STREAM, SOCK_DGRAM; close-on-exec) bound at `path`, and
// listening with `backlog` when that is > 0: the descriptor, or -1 (errno set) when a call fails
// or the path is too long for a Unix socket.
int BindUnixSocket(const std::string& path, int type, int backlog = 0);
std::string ReadFile(const std::string& path);
// The first line of `text` that contains `needle`, without its newline; "" when none does. For
// checking one line of a log or a table with Catch::Matches: std::regex matches recursively, and
// a pattern such as "(.|\n)*" over a whole log overflows the stack (it did under ASan).
std::string LineWith(const std::string& text, const std::string& needle);
void WriteFile(const std::string& path, const std::string& bytes);

// Concatenated framed records (plain TFRecord bytes).
std::string FrameRecords(const std::vector<std::string>& records);

// Records 0..1099 with an int64 "id" = index, and from record 1050 on (past the start-up
// sample's 1000 records) a float "late" = index: the records of a feature only later ones have.
// Returns the byte offset of record 1050.
uint64_t WriteLateFeatureFile(const std::string& path);

// Compresses `plain` as a gzip member (with optional header fields) or a zlib stream.
struct GzipOptions {
  int level = 6;
  int strategy = 0;  // Z_DEFAULT_STRATEGY
  std::string extra, name, comment;  // FEXTRA / FNAME / FCOMMENT when non-empty
  bool header_crc = false;           // FHCRC
};
std::string GzipBytes(const std::string& plain, const GzipOptions& options = {});
std::string ZlibBytes(const std::string& plain, int level = 6);

// Standard base64 (RFC 4648, padded) to bytes, as the golden files write bytes values.
// Throws std::runtime_error on a character outside the alphabet.
std::string Base64Decode(const std::string& in);

// Lowers this process's soft open-file limit (RLIMIT_NOFILE) so that `spare` more descriptors
// can be opened (the lowest free one + spare), and restores it on destruction, also when a
// REQUIRE between fails. Tests use it to make io_uring set-up fail with EMFILE while io_uring
// works. Throws std::runtime_error when the limit cannot be read or set.
class TightFileLimit {
 public:
  explicit TightFileLimit(int spare);
  ~TightFileLimit();
  TightFileLimit(const TightFileLimit&) = delete;
  TightFileLimit& operator=(const TightFileLimit&) = delete;

 private:
  uint64_t saved_soft_ = 0;
};

// Skips: a test case that cannot run here (no cgroup v1, no FUSE, the real data absent) calls
// Skip(why), which prints "RINGFEED_SKIP: <why>" and counts the test case as skipped; the
// caller returns. tests/catch_main.cc then says how many test cases of the program were skipped
// and exits 77 (CTest's SKIP_RETURN_CODE: "Skipped") only when every test case that ran was
// skipped and none failed; a program that ran other test cases passes or fails on them, and a
// failure is never reported as a skip.
void Skip(const std::string& why);
struct SkipTally {
  int cases_run = 0;
  int cases_skipped = 0;
};
SkipTally& Skips();  // kept by tests/catch_main.cc's listener
bool SkippedInThisCase();  // Skip() was called since the current test case started
void StartTestCase();

// The directory of the real TensorFlow-written files: $TFX_DATA's components/testdata layout
// when set (as config/examples/taxi.yaml takes it), else ../shared/data/tfx; "" when absent.
// When absent: with CI=true the calling test fails; otherwise it Skip()s, and the caller should
// return.
std::string TfxDirOrSkip();

}  // namespace ringfeed::testing
