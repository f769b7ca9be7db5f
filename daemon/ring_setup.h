// Writing a new segment's superblock: identity, geometry and the batch schema, marked ready
// last (shm/ring_layout.h). Used by ringfeedd at start-up and by tests that drive BatchWriter
// on a real segment.
//
// Thread-safety: call before anyone else can see the segment.
#pragma once

#include <cstdint>
#include <string>

#include "format/feature_spec.h"
#include "shm/ring.h"
#include "shm/ring_layout.h"
#include "shm/segment.h"

namespace ringfeed {

struct RingSetup {
  std::string job;
  uint64_t instance_id = 0;
  shm::Geometry geometry;
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;  // usable bytes per slot (<= geometry.slot_stride)
  uint32_t batch_size = 0;
  bool ranks = false;       // consumers.mode: ranks
  uint32_t queue_count = 1;
  uint64_t heartbeat_period_ns = 100'000'000;
};

// Fills *sb (a zeroed superblock) and sets `ready`. Throws std::invalid_argument when the
// schema does not fit the layout (more than shm::kMaxFeatures features, a name of
// shm::kMaxNameBytes bytes or more, more than shm::kMaxRank dimensions), naming the feature.
void WriteSuperblock(const RingSetup& setup, const FeatureSpecs& specs, shm::Superblock* sb);

// The ring as the daemon laid it out, for `mapping` (the segment's start): every daemon
// component takes its geometry from here, never from the superblock, which any process that
// can attach may write (a slot_bytes or slot_count changed there must not move the daemon's
// writes, shm/ring.h "Trust").
shm::Ring DaemonRing(const RingSetup& setup, void* mapping);

}  // namespace ringfeed
