// Runs the C ABI round trip (client_c_abi_test.c, compiled as C) against the test producer.
#include <catch2/catch.hpp>

#include "tests/ring_test_producer.h"
#include "tests/test_support.h"

extern "C" int rf_c_abi_roundtrip(const char* runtime_dir, int expected_batches, char* report, size_t report_len);

namespace ringfeed {
namespace {

TEST_CASE("C ABI: attach, schema, batches, end of data, errors") {
  testing::TempDir dir;
  testing::ProducerOptions options;
  options.runtime_dir = dir.path().string();
  options.job = "cjob";
  auto producer = testing::ForkProducer(options, [](testing::RingTestProducer& p) {
    for (uint64_t n = 0; n < 12; ++n) {
      p.PublishBatch(0, n, 0, n == 11 ? shm::kBatchEndOfEpoch | shm::kBatchEndOfData : 0, n == 11 ? 2 : -1);
    }
    p.SetState(shm::DaemonState::kEndOfData);
  });
  char report[1024] = "";
  const int rc = rf_c_abi_roundtrip(options.runtime_dir.c_str(), 12, report, sizeof report);
  INFO(report);
  CHECK(rc == 0);
}

}  // namespace
}  // namespace ringfeed
