#include "daemon/ring_setup.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "format/utf8.h"
#include "shm/ring.h"

namespace ringfeed {

static_assert(static_cast<int>(DType::kFloat64) == 9 && static_cast<int>(DType::kBytes) == 2,
              "shm/ring_layout.h repeats format/feature_spec.h's DType numbering");

namespace {

void WriteSchema(const FeatureSpecs& specs, shm::Superblock* sb) {
  if (specs.size() > shm::kMaxFeatures) {
    throw std::invalid_argument("the job has " + std::to_string(specs.size()) + " features; the ring holds at most " +
                                std::to_string(shm::kMaxFeatures));
  }
  sb->feature_count = static_cast<uint32_t>(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const FeatureSpec& s = specs[i];
    shm::FeatureDesc& d = sb->features[i];
    if (s.name.size() >= shm::kMaxNameBytes) {
      throw std::invalid_argument("feature " + QuotedName(s.name) + ": names in the ring are at most " +
                                  std::to_string(shm::kMaxNameBytes - 1) + " bytes");
    }
    if (s.shape.size() > shm::kMaxRank) {
      throw std::invalid_argument("feature " + QuotedName(s.name) + ": shape has " + std::to_string(s.shape.size()) +
                                  " dimensions; the ring supports at most " + std::to_string(shm::kMaxRank));
    }
    std::memcpy(d.name, s.name.data(), s.name.size());
    d.name[s.name.size()] = '\0';
    d.dtype = static_cast<uint8_t>(s.dtype);
    d.type = s.type == FeatureType::kFixedLen ? shm::kFixedLen : shm::kVarLen;
    d.rank = static_cast<uint8_t>(s.type == FeatureType::kFixedLen ? s.shape.size() : 0);
    for (size_t k = 0; k < d.rank; ++k) d.shape[k] = s.shape[k];
  }
}

}  // namespace

void WriteSuperblock(const RingSetup& setup, const FeatureSpecs& specs, shm::Superblock* sb) {
  std::memcpy(sb->magic, shm::kMagic, sizeof sb->magic);
  sb->layout_version = shm::kLayoutVersion;
  sb->superblock_bytes = sizeof(shm::Superblock);
  sb->layout_hash = shm::kLayoutHash;
  sb->instance_id = setup.instance_id;
  sb->daemon_pid = ::getpid();
  std::snprintf(sb->job, sizeof sb->job, "%s", setup.job.c_str());
  sb->state.store(static_cast<uint32_t>(shm::DaemonState::kRunning), std::memory_order_relaxed);
  sb->heartbeat_period_ns = setup.heartbeat_period_ns;
  sb->heartbeat_ns.store(shm::MonotonicNs(), std::memory_order_relaxed);
  sb->segment_bytes = setup.geometry.segment_bytes;
  sb->slots_offset = setup.geometry.slots_offset;
  sb->slot_stride = setup.geometry.slot_stride;
  sb->slot_bytes = setup.slot_bytes;
  sb->slot_count = setup.slot_count;
  sb->batch_size = setup.batch_size;
  sb->mode = static_cast<uint32_t>(setup.ranks ? shm::DeliveryMode::kRanks : shm::DeliveryMode::kShared);
  sb->queue_count = setup.queue_count;
  WriteSchema(specs, sb);
  sb->ready.store(1, std::memory_order_release);
}

shm::Ring DaemonRing(const RingSetup& setup, void* mapping) {
  shm::Ring ring;
  ring.sb = static_cast<shm::Superblock*>(mapping);
  ring.slot_count = setup.slot_count;
  ring.queue_count = setup.queue_count;
  ring.slots_offset = setup.geometry.slots_offset;
  ring.slot_stride = setup.geometry.slot_stride;
  ring.slot_bytes = setup.slot_bytes;
  return ring;
}

}  // namespace ringfeed
