#include "tests/test_support.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>

#include "format/example_builder.h"
#include "format/tfrecord_writer.h"

namespace ringfeed::testing {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "ringfeed-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), std::min(path.size() + 1, sizeof address.sun_path));
  return address;
}

int BindUnixSocket(const std::string& path, int type, int backlog) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  const sockaddr_un address = UnixAddress(path);
  const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      (backlog > 0 && ::listen(fd, backlog) != 0)) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

std::string LineWith(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return "";
  const size_t begin = text.rfind('\n', at);
  const size_t from = begin == std::string::npos ? 0 : begin + 1;
  const size_t end = text.find('\n', at);
  return text.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string FrameRecords(const std::vector<std::string>& records) {
  std::string out;
  for (const auto& r : records) out += FrameRecord(r);
  return out;
}

uint64_t WriteLateFeatureFile(const std::string& path) {
  std::vector<std::string> records;
  uint64_t late_at = 0;
  for (int64_t i = 0; i < 1100; ++i) {
    ExampleBuilder b;
    b.AddInt64("id", {i});
    if (i >= 1050) b.AddFloat("late", {static_cast<float>(i)});
    records.push_back(b.Serialize());
    if (i < 1050) late_at += FrameRecord(records.back()).size();
  }
  WriteFile(path, FrameRecords(records));
  return late_at;
}

namespace {

std::string Deflate(const std::string& plain, int window_bits, int level, int strategy, gz_header* header) {
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, strategy) != Z_OK) throw std::runtime_error("deflateInit2");
  if (header != nullptr && deflateSetHeader(&z, header) != Z_OK) throw std::runtime_error("deflateSetHeader");
  std::string out(deflateBound(&z, plain.size()) + 1024, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(plain.data()));
  z.avail_in = static_cast<uInt>(plain.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

std::string GzipBytes(const std::string& plain, const GzipOptions& o) {
  gz_header h{};
  h.os = 3;
  std::string extra = o.extra, name = o.name, comment = o.comment;
  if (!extra.empty()) {
    h.extra = reinterpret_cast<Bytef*>(extra.data());
    h.extra_len = static_cast<uInt>(extra.size());
  }
  if (!name.empty()) h.name = reinterpret_cast<Bytef*>(name.data());
  if (!comment.empty()) h.comment = reinterpret_cast<Bytef*>(comment.data());
  h.hcrc = o.header_crc ? 1 : 0;
  return Deflate(plain, 16 + MAX_WBITS, o.level, o.strategy, &h);
}

std::string ZlibBytes(const std::string& plain, int level) {
  return Deflate(plain, MAX_WBITS, level, Z_DEFAULT_STRATEGY, nullptr);
}

TightFileLimit::TightFileLimit(int spare) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) throw std::runtime_error(std::string("getrlimit: ") + std::strerror(errno));
  saved_soft_ = limit.rlim_cur;
  const int lowest = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (lowest < 0) throw std::runtime_error(std::string("open /dev/null: ") + std::strerror(errno));
  ::close(lowest);
  limit.rlim_cur = static_cast<rlim_t>(lowest + spare);
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) throw std::runtime_error(std::string("setrlimit: ") + std::strerror(errno));
}

TightFileLimit::~TightFileLimit() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = static_cast<rlim_t>(saved_soft_);
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

std::string Base64Decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) throw std::runtime_error("bad base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

namespace {
bool g_skipped_in_case = false;
}  // namespace

void Skip(const std::string& why) {
  std::cout << "RINGFEED_SKIP: " << why << std::endl;
  g_skipped_in_case = true;
}

SkipTally& Skips() {
  static SkipTally tally;
  return tally;
}

bool SkippedInThisCase() { return g_skipped_in_case; }
void StartTestCase() { g_skipped_in_case = false; }

std::string TfxDirOrSkip() {
  // TFX_DATA: a checkout of github.com/tensorflow/tfx's tfx/components/testdata (the example
  // configs' variable), for a clone outside this workspace.
  const char* data = std::getenv("TFX_DATA");
  std::filesystem::path dir = data != nullptr && *data != '\0' ? std::filesystem::path(data) : RINGFEED_TFX_DIR;
  if (std::filesystem::is_directory(dir)) return std::filesystem::canonical(dir).string();
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") {
    FAIL("CI=true but the real TFRecord files are missing at " << dir.string());
  }
  Skip(dir.string() + " not found (a clone without ../shared/data: set TFX_DATA to a copy of TFX's "
       "tfx/components/testdata to run these)");
  return "";
}

}  // namespace ringfeed::testing
