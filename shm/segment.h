// Segment: one POSIX shared-memory object (in /dev/shm) mapped read-write into this process:
// the ring of one job (layout: shm/ring_layout.h). Built on boost::interprocess
// shared_memory_object + mapped_region.
//
// The daemon Create()s the segment: the whole size is reserved up front with posix_fallocate,
// so a /dev/shm that is too small is an error at start-up (ShmError naming the bytes needed and
// free) and never a SIGBUS when a page is first touched; its page tables are then filled
// writable (MADV_POPULATE_WRITE, Linux >= 5.14), so that making the first batches takes no page
// fault per 4 KiB of slot. Consumers Open() it by the name the
// daemon's welcome message gives. The mapping lives as long as the Segment object; removing
// the name (Remove) does not unmap anyone.
//
// Errors: ShmError with the segment name, the cause and the fix. Thread-safety: a Segment is
// not synchronised itself; the memory it maps is shared through the atomics of ring_layout.h.
#pragma once

#include <sys/types.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "shm/file_id.h"
#include "shm/ring_layout.h"
#include "shm/shm_error.h"

namespace ringfeed::shm {

// Where the slots lie, in bytes. slots_offset and slot_stride are multiples of kPageBytes.
struct Geometry {
  uint64_t slots_offset = 0;   // sizeof(Superblock) rounded up to kPageBytes
  uint64_t slot_stride = 0;    // slot_bytes rounded up to kPageBytes
  uint64_t segment_bytes = 0;  // slots_offset + slot_count * slot_stride
};

// Throws ShmError when slot_count is 0 or above kMaxSlots, slot_bytes is too small to hold a
// SlotHeader, or the total overflows.
Geometry ComputeGeometry(uint32_t slot_count, uint64_t slot_bytes);

// "256.0 MiB", "4.0 KiB", "512 B": for messages.
std::string HumanBytes(uint64_t bytes);
// The size of the file system at /dev/shm in bytes (free or not), or UINT64_MAX when it can't
// be told: a segment larger than this can never be created there.
uint64_t ShmTotalBytes();
// Bytes free in /dev/shm now (statvfs: f_bavail); UINT64_MAX when it cannot be told.
uint64_t ShmFreeBytes();

class Segment {
 public:
  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  // Creates the segment `name` ("/ringfeed.<job>.<hash>", shm/names.h) of `segment_bytes`,
  // zero-filled and fully reserved, replacing a stale one of that name (the caller has made
  // sure no live daemon owns it). Permissions: `mode` (0600 by default); with `group`, the
  // segment's group is set to it and the mode should allow the group (0660). Throws ShmError
  // — e.g. when /dev/shm has too little free space, after removing what it created — and
  // SegmentNameTakenError when the name is held by what this user may not or should not
  // remove (another user's file, a directory). `replaced`, when given: what was removed to make
  // room ("a file of 925696 bytes, uid 0, modified 2026-12-05 18:31:02 UTC", and for a ring
  // ", the ring of ringfeedd pid P, which has exited" or "..., which still runs (the job's lock
  // file was removed under it)"), or "".
  static Segment Create(const std::string& name, uint64_t segment_bytes, mode_t mode = 0600,
                        std::optional<gid_t> group = std::nullopt, std::string* replaced = nullptr);

  // Opens the existing segment `name` read-write and maps all of it. Throws SegmentMissingError
  // (a ShmError) when it does not exist ("is ringfeedd running for job X?"), ShmError when it
  // can't be opened or mapped.
  static Segment Open(const std::string& name);

  // Removes the name; true if it existed. Mappings stay valid. The daemon removes its own
  // segment with UnlinkIfSame(Path(name), file_id()) instead (shm/file_id.h): the name may
  // have been given to another file meanwhile.
  static bool Remove(const std::string& name);

  // The segment's path, /dev/shm + name.
  static std::string Path(const std::string& name);

  // The pid of the ringfeedd that made segment `name` (its superblock's daemon_pid), read with
  // pread, not mapped (a file truncated meanwhile reads short: no SIGBUS); 0 when there is no such
  // file or it is no segment of this layout. That process may have exited since.
  static int32_t DaemonPid(const std::string& name);

  bool valid() const { return data_ != nullptr; }
  const std::string& name() const { return name_; }
  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // The file in /dev/shm this segment maps (fstat when it was created or opened).
  FileId file_id() const { return file_id_; }
  Superblock* superblock() const { return reinterpret_cast<Superblock*>(data_); }
  // Slots: through a shm::Ring (shm/ring.h), which holds the geometry copied once.

 private:
  Segment(std::string name, boost::interprocess::mapped_region region, FileId file_id);

  std::string name_;
  boost::interprocess::mapped_region region_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  FileId file_id_;
};

}  // namespace ringfeed::shm
