// ShmError: what shm/ throws when a segment can't be created, opened or mapped. The message
// names the segment and, where one exists, the fix (e.g. "enlarge /dev/shm").
#pragma once

#include <stdexcept>
#include <string>

namespace ringfeed::shm {

class ShmError : public std::runtime_error {
 public:
  explicit ShmError(const std::string& message) : std::runtime_error(message) {}
};

// Segment::Open: no segment of that name exists (ENOENT).
class SegmentMissingError : public ShmError {
 public:
  using ShmError::ShmError;
};

// Segment::Create: the name is another user's segment, which this one may not remove (/dev/shm
// is sticky): an operator must act, a restart would not help.
class SegmentNameTakenError : public ShmError {
 public:
  using ShmError::ShmError;
};

}  // namespace ringfeed::shm
