// CheckSuperblock: may this process use the segment it just mapped? Compares the superblock
// with this build's shm/ring_layout.h and checks that its geometry and schema are consistent,
// so that nothing read from it later can point outside the mapping.
//
// Returns "" when usable, else one message that names what differs with both values and the
// fix, e.g. "layout version 2 in the segment, this client speaks 1: rebuild the trainer against
// the daemon's ringfeed version". Checks, in order: size of the mapping, ready flag, magic,
// layout version, superblock size, layout hash, segment size, geometry (slot_count <=
// kMaxSlots, slots inside the segment, page alignment), queues, schema (feature_count <=
// kMaxFeatures, names NUL-terminated, known dtypes and types, rank <= kMaxRank, shapes >= 0).
// Reads only; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace ringfeed::shm {

std::string CheckSuperblock(const void* mapping, uint64_t mapped_bytes);

}  // namespace ringfeed::shm
