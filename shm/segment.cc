#include "shm/segment.h"

#include "shm/names.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>

namespace ringfeed::shm {
namespace bip = boost::interprocess;
namespace {

// glibc's shm_open puts every POSIX shared-memory object here.
constexpr char kShmDir[] = "/dev/shm";

uint64_t RoundUp(uint64_t value, uint64_t to) { return (value + to - 1) / to * to; }

// "/ringfeed.<job>.<hash>" -> "<job>" (or the whole name if it does not look like ours).
std::string JobOfSegment(const std::string& name) {
  std::string_view rest(name);
  constexpr std::string_view kPrefix = "/ringfeed.";
  if (rest.substr(0, kPrefix.size()) != kPrefix) return name;
  rest.remove_prefix(kPrefix.size());
  size_t dot = rest.rfind('.');
  if (dot == std::string_view::npos) return std::string(rest);
  return std::string(rest.substr(0, dot));
}

// The pid in the superblock of the ringfeedd segment at `path`, or 0 when it is no segment of
// this layout. Read with pread, not mapped: a file truncated meanwhile reads short, no SIGBUS.
int32_t SegmentDaemonPid(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return 0;
  char head[offsetof(Superblock, daemon_pid) + sizeof(int32_t)] = {};
  const bool whole = ::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head);
  ::close(fd);
  uint32_t version = 0;
  int32_t pid = 0;
  std::memcpy(&version, head + offsetof(Superblock, layout_version), sizeof version);
  std::memcpy(&pid, head + offsetof(Superblock, daemon_pid), sizeof pid);
  return whole && std::memcmp(head, kMagic, sizeof kMagic) == 0 && version == kLayoutVersion && pid > 0 ? pid : 0;
}

}  // namespace

uint64_t ShmFreeBytes() {
  struct statvfs st {};
  if (statvfs(kShmDir, &st) != 0) return UINT64_MAX;  // can't tell: let posix_fallocate decide
  return uint64_t{st.f_bavail} * st.f_frsize;
}

uint64_t ShmTotalBytes() {
  struct statvfs st {};
  if (statvfs(kShmDir, &st) != 0) return UINT64_MAX;
  return uint64_t{st.f_blocks} * st.f_frsize;
}

namespace {

std::string NoSpaceMessage(uint64_t needed, uint64_t free_bytes) {
  return "shared memory: the ring needs " + std::to_string(needed) + " bytes (" + HumanBytes(needed) +
         ") but " + kShmDir + " has " + std::to_string(free_bytes) +
         " bytes free; lower ring.slots or ring.slot_bytes, or enlarge /dev/shm (docker run --shm-size=...)";
}

}  // namespace

Geometry ComputeGeometry(uint32_t slot_count, uint64_t slot_bytes) {
  if (slot_count == 0 || slot_count > kMaxSlots) {
    throw ShmError("shared memory: ring.slots is " + std::to_string(slot_count) + "; it must be 1.." +
                   std::to_string(kMaxSlots));
  }
  if (slot_bytes < sizeof(SlotHeader)) {
    throw ShmError("shared memory: ring.slot_bytes is " + std::to_string(slot_bytes) +
                   "; a slot needs at least " + std::to_string(sizeof(SlotHeader)) + " bytes");
  }
  constexpr uint64_t kLimit = uint64_t{1} << 56;  // far beyond any /dev/shm; keeps sums exact
  if (slot_bytes > kLimit / kMaxSlots) {
    throw ShmError("shared memory: ring.slot_bytes " + std::to_string(slot_bytes) + " is too large");
  }
  Geometry g;
  g.slots_offset = RoundUp(sizeof(Superblock), kPageBytes);
  g.slot_stride = RoundUp(slot_bytes, kPageBytes);
  g.segment_bytes = g.slots_offset + uint64_t{slot_count} * g.slot_stride;
  return g;
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  return text;
}

Segment::Segment(std::string name, bip::mapped_region region, FileId file_id)
    : name_(std::move(name)), region_(std::move(region)),
      data_(static_cast<uint8_t*>(region_.get_address())), size_(region_.get_size()), file_id_(file_id) {}

Segment::Segment(Segment&& other) noexcept
    : name_(std::move(other.name_)), region_(std::move(other.region_)),
      data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      file_id_(std::exchange(other.file_id_, {})) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    name_ = std::move(other.name_);
    region_ = std::move(other.region_);  // unmaps ours; leaves `other` empty
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    file_id_ = std::exchange(other.file_id_, {});
  }
  return *this;
}

Segment Segment::Create(const std::string& name, uint64_t segment_bytes, mode_t mode,
                        std::optional<gid_t> group, std::string* replaced) {
  const std::string path = std::string(kShmDir) + name;
  // A directory of that name is nobody's segment: not removed (shm_unlink would fail on it
  // anyway), and no restart makes it go.
  struct stat before {};
  const bool existed = ::lstat(path.c_str(), &before) == 0;
  if (existed && S_ISDIR(before.st_mode)) {
    throw SegmentNameTakenError("shared memory: cannot create segment " + name + " in " + kShmDir + ": " + path +
                                " is a directory (uid " + std::to_string(before.st_uid) +
                                "), not a segment; remove it, or use another runtime directory");
  }
  const int32_t previous_pid = existed && S_ISREG(before.st_mode) ? SegmentDaemonPid(path) : 0;
  bip::shared_memory_object::remove(name.c_str());
  bip::shared_memory_object object;
  try {
    object = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write,
                                       bip::permissions(mode));
  } catch (const bip::interprocess_exception& e) {
    // A name still there after the remove above is a file this user may not remove.
    if (struct stat st {}; ::lstat(path.c_str(), &st) == 0 && st.st_uid != ::geteuid()) {
      throw SegmentNameTakenError("shared memory: cannot create segment " + name + " in " + kShmDir + ": " +
                                  path + " exists and belongs to uid " + std::to_string(st.st_uid) +
                                  ", not to the daemon's user (uid " + std::to_string(::geteuid()) + "), and " +
                                  kShmDir + " lets only its owner remove it: another user's process made it "
                                  "(the name comes from the job and the runtime directory); remove it as root "
                                  "or that user, or use another runtime directory");
    }
    throw ShmError("shared memory: cannot create segment " + name + " in " + kShmDir + ": " +
                   e.what() + "; check that " + kShmDir + " is writable for the daemon's user");
  }
  // Everything below removes the half-made segment before throwing.
  auto fail = [&](const std::string& message) {
    object = bip::shared_memory_object();
    bip::shared_memory_object::remove(name.c_str());
    throw ShmError(message);
  };
  const int fd = object.get_mapping_handle().handle;
  struct stat st {};
  if (fstat(fd, &st) != 0) fail("shared memory: cannot stat segment " + name + ": " + std::strerror(errno));
  if (group) {
    if (fchown(fd, static_cast<uid_t>(-1), *group) != 0) {
      fail("shared memory: cannot give segment " + name + " to group " + std::to_string(*group) +
           ": " + std::strerror(errno) + "; the daemon's user must be a member of permissions.group");
    }
    fchmod(fd, mode);  // chown may clear mode bits
  }
  if (ftruncate(fd, static_cast<off_t>(segment_bytes)) != 0) {
    const int err = errno;
    if (err == ENOSPC || err == EFBIG) fail(NoSpaceMessage(segment_bytes, ShmFreeBytes()));
    fail("shared memory: cannot size segment " + name + " to " + std::to_string(segment_bytes) +
         " bytes: " + std::strerror(err));
  }
  // tmpfs allocates pages on first touch; a full /dev/shm would then kill us with SIGBUS.
  // Reserving every page now turns that into this error.
  if (uint64_t free_bytes = ShmFreeBytes(); segment_bytes > free_bytes) {
    fail(NoSpaceMessage(segment_bytes, free_bytes));
  }
  if (int err = posix_fallocate(fd, 0, static_cast<off_t>(segment_bytes)); err != 0) {
    if (err == ENOSPC) fail(NoSpaceMessage(segment_bytes, ShmFreeBytes()));
    fail("shared memory: cannot reserve " + std::to_string(segment_bytes) + " bytes for segment " +
         name + ": " + std::strerror(err));
  }
  try {
    bip::mapped_region region(object, bip::read_write, 0, segment_bytes);
    // The daemon writes every slot: fill its page tables writable (and clear the fallocated
    // pages) now, at start, rather than by a page fault per 4 KiB the first time each slot is
    // written while batches are being made. MAP_POPULATE would map shared pages read-only
    // and still take a fault at the first write. Linux >= 5.14 and glibc >= 2.35 headers;
    // elsewhere it stays lazy.
#ifdef MADV_POPULATE_WRITE
    ::madvise(region.get_address(), segment_bytes, MADV_POPULATE_WRITE);
#endif
    if (replaced != nullptr) {
      replaced->clear();
      if (existed) {
        char when[64] = {};
        struct tm utc {};
        if (::gmtime_r(&before.st_mtime, &utc) != nullptr) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
        *replaced = std::string(S_ISREG(before.st_mode) ? "a file of " + std::to_string(before.st_size) + " bytes"
                                : S_ISLNK(before.st_mode) ? std::string("a symbolic link")
                                                          : std::string("a special file")) +
                    ", uid " + std::to_string(before.st_uid) + ", modified " + when;
        if (previous_pid != 0) {
          *replaced += ", the ring of ringfeedd pid " + std::to_string(previous_pid) +
                       (ProcessExited(previous_pid) ? ", which has exited"
                                                    : ", which still runs (the job's lock file was removed under it)");
        }
      }
    }
    return Segment(name, std::move(region), FileId::Of(st));
  } catch (const bip::interprocess_exception& e) {
    fail("shared memory: cannot map segment " + name + " (" + std::to_string(segment_bytes) +
         " bytes): " + e.what());
  }
  return {};  // not reached
}

Segment Segment::Open(const std::string& name) {
  bip::shared_memory_object object;
  try {
    object = bip::shared_memory_object(bip::open_only, name.c_str(), bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    const int err = e.get_native_error();
    if (err == ENOENT) {
      throw SegmentMissingError("no ringfeed segment " + name + ": is ringfeedd running for job " +
                     JobOfSegment(name) + "?");
    }
    if (err == EACCES || err == EPERM) {
      throw ShmError("no permission to open ringfeed segment " + std::string(kShmDir) + name +
                     " read-write: run the trainer as the daemon's user or set the job's "
                     "permissions.group to a group this user is in");
    }
    throw ShmError("cannot open ringfeed segment " + name + ": " + e.what());
  }
  struct stat st {};
  if (fstat(object.get_mapping_handle().handle, &st) != 0) {
    throw ShmError("cannot stat ringfeed segment " + name + ": " + std::strerror(errno));
  }
  if (st.st_size <= 0) {
    throw ShmError("ringfeed segment " + name + " is empty: ringfeedd for job " + JobOfSegment(name) +
                   " is still creating it; attach again");
  }
  try {
    bip::mapped_region region(object, bip::read_write, 0, static_cast<size_t>(st.st_size));
    return Segment(name, std::move(region), FileId::Of(st));
  } catch (const bip::interprocess_exception& e) {
    throw ShmError("cannot map ringfeed segment " + name + " (" + std::to_string(st.st_size) +
                   " bytes): " + e.what());
  }
}

bool Segment::Remove(const std::string& name) {
  return bip::shared_memory_object::remove(name.c_str());
}

std::string Segment::Path(const std::string& name) { return std::string(kShmDir) + name; }

int32_t Segment::DaemonPid(const std::string& name) { return SegmentDaemonPid(Path(name)); }

}  // namespace ringfeed::shm
