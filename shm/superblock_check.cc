#include "shm/superblock_check.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "shm/dtype.h"
#include "shm/ring_layout.h"

namespace ringfeed::shm {
namespace {

std::string Hex(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016" PRIx64, v);
  return text;
}

std::string Str(uint64_t v) { return std::to_string(v); }

bool HasNul(const char* chars, size_t n) { return std::memchr(chars, '\0', n) != nullptr; }

// The magic as text, with non-printable bytes escaped.
std::string Printable(const char* bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
      out += esc;
    }
  }
  return out;
}

std::string CheckFeature(const FeatureDesc& f, uint32_t index) {
  const std::string which = "feature " + Str(index);
  if (!HasNul(f.name, kMaxNameBytes)) {
    return which + ": name is not NUL-terminated within " + Str(kMaxNameBytes) + " bytes";
  }
  if (f.name[0] == '\0') return which + ": empty name";
  const std::string named = which + " '" + f.name + "'";
  if (!IsKnownDType(f.dtype)) {
    return named + ": unknown dtype " + Str(f.dtype) + " (this client knows 0.." +
           Str(kDTypeCount - 1) + "): rebuild the trainer against the daemon's ringfeed version";
  }
  if (f.type != kFixedLen && f.type != kVarLen) return named + ": unknown type " + Str(f.type);
  if (f.rank > kMaxRank) {
    return named + ": rank " + Str(f.rank) + " exceeds the maximum " + Str(kMaxRank);
  }
  if (f.type == kFixedLen) {
    uint64_t elements = 1;
    for (uint32_t d = 0; d < f.rank; ++d) {
      if (f.shape[d] < 0) return named + ": shape[" + Str(d) + "] = " + std::to_string(f.shape[d]) + " < 0";
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(f.shape[d]), &elements) ||
          elements > (uint64_t{1} << 48)) {
        return named + ": shape has too many elements per row";
      }
    }
  }
  return "";
}

}  // namespace

std::string CheckSuperblock(const void* mapping, uint64_t mapped_bytes) {
  if (mapped_bytes < sizeof(Superblock)) {
    return "segment is " + Str(mapped_bytes) + " bytes, smaller than a superblock (" +
           Str(sizeof(Superblock)) + " bytes): not a ringfeed segment, or the daemon is still creating it";
  }
  const auto& sb = *static_cast<const Superblock*>(mapping);
  const bool ready = sb.ready.load(std::memory_order_acquire) != 0;
  static const char kZeros[sizeof kMagic] = {};
  if (!ready && std::memcmp(sb.magic, kZeros, sizeof kMagic) == 0) {
    return "the segment is not ready (ready = 0): ringfeedd is still starting; attach again";
  }
  if (std::memcmp(sb.magic, kMagic, sizeof kMagic) != 0) {
    return "magic '" + Printable(sb.magic, sizeof kMagic) + "' in the segment, expected '" +
           Printable(kMagic, sizeof kMagic) + "': not a ringfeed segment";
  }
  if (sb.layout_version != kLayoutVersion) {
    return "layout version " + Str(sb.layout_version) + " in the segment, this client speaks " +
           Str(kLayoutVersion) + ": rebuild the trainer against the daemon's ringfeed version";
  }
  if (sb.superblock_bytes != sizeof(Superblock)) {
    return "superblock size " + Str(sb.superblock_bytes) + " in the segment, this client's is " +
           Str(sizeof(Superblock)) + ": rebuild the trainer against the daemon's ringfeed version";
  }
  if (sb.layout_hash != kLayoutHash) {
    return "layout hash " + Hex(sb.layout_hash) + " in the segment, this client has " + Hex(kLayoutHash) +
           ": the daemon and the trainer were built from different shm/ring_layout.h; rebuild the "
           "trainer against the daemon's ringfeed version";
  }
  if (sb.segment_bytes > mapped_bytes) {
    return "segment size " + Str(sb.segment_bytes) + " bytes in the superblock, but only " +
           Str(mapped_bytes) + " bytes are mapped";
  }
  if (!ready) return "the segment is not ready (ready = 0): ringfeedd is still starting; attach again";

  // Geometry.
  if (sb.slot_count == 0 || sb.slot_count > kMaxSlots) {
    return "slot_count " + Str(sb.slot_count) + " is outside 1.." + Str(kMaxSlots);
  }
  if (sb.slots_offset % kPageBytes != 0 || sb.slot_stride % kPageBytes != 0) {
    return "slots_offset " + Str(sb.slots_offset) + " or slot_stride " + Str(sb.slot_stride) +
           " is not a multiple of " + Str(kPageBytes);
  }
  if (sb.slots_offset < sizeof(Superblock)) {
    return "slots_offset " + Str(sb.slots_offset) + " overlaps the superblock (" +
           Str(sizeof(Superblock)) + " bytes)";
  }
  if (sb.slot_bytes < sizeof(SlotHeader) || sb.slot_bytes > sb.slot_stride) {
    return "slot_bytes " + Str(sb.slot_bytes) + " is outside " + Str(sizeof(SlotHeader)) +
           "..slot_stride (" + Str(sb.slot_stride) + ")";
  }
  uint64_t slots_bytes = 0, end = 0;
  if (__builtin_mul_overflow(uint64_t{sb.slot_count}, sb.slot_stride, &slots_bytes) ||
      __builtin_add_overflow(sb.slots_offset, slots_bytes, &end) || end > sb.segment_bytes) {
    return Str(sb.slot_count) + " slots of " + Str(sb.slot_stride) + " bytes at offset " +
           Str(sb.slots_offset) + " do not fit in the segment's " + Str(sb.segment_bytes) + " bytes";
  }
  if (sb.batch_size == 0) return "batch_size is 0";
  if (sb.mode == static_cast<uint32_t>(DeliveryMode::kShared)) {
    if (sb.queue_count != 1) return "queue_count " + Str(sb.queue_count) + " in shared mode (must be 1)";
  } else if (sb.mode == static_cast<uint32_t>(DeliveryMode::kRanks)) {
    if (sb.queue_count == 0 || sb.queue_count > kMaxQueues) {
      return "queue_count " + Str(sb.queue_count) + " is outside 1.." + Str(kMaxQueues);
    }
  } else {
    return "unknown delivery mode " + Str(sb.mode);
  }
  if (sb.state.load(std::memory_order_acquire) > static_cast<uint32_t>(DaemonState::kStopped)) {
    return "unknown daemon state " + Str(sb.state.load());
  }
  if (!HasNul(sb.job, kJobNameBytes)) return "job name is not NUL-terminated";

  // Schema.
  if (sb.feature_count > kMaxFeatures) {
    return "feature_count " + Str(sb.feature_count) + " exceeds the maximum " + Str(kMaxFeatures);
  }
  for (uint32_t i = 0; i < sb.feature_count; ++i) {
    if (std::string error = CheckFeature(sb.features[i], i); !error.empty()) return error;
  }
  return "";
}

}  // namespace ringfeed::shm
