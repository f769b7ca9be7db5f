#include <catch2/catch.hpp>
#include <string>

#include "format/crc32c.h"

using namespace ringfeed;

TEST_CASE("CRC-32C matches the published check values") {
  // RFC 3720 (iSCSI) B.4 and the CRC catalogue's check value for "123456789".
  CHECK(Crc32c("123456789", 9) == 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  CHECK(Crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(Crc32c(ones.data(), ones.size()) == 0x62A8AB43u);
  std::string inc(32, '\0');
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<char>(i);
  CHECK(Crc32c(inc.data(), inc.size()) == 0x46DD794Eu);
  CHECK(Crc32c("", 0) == 0u);
}

TEST_CASE("CRC-32C extends across split buffers") {
  std::string s(10000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 31 + 7);
  const uint32_t whole = Crc32c(s.data(), s.size());
  for (size_t cut : {0u, 1u, 7u, 8u, 63u, 4096u, 9999u}) {
    CHECK(Crc32cExtend(Crc32c(s.data(), cut), s.data() + cut, s.size() - cut) == whole);
  }
}

TEST_CASE("TFRecord CRC masking round-trips and matches TensorFlow's constant") {
  // tsl::crc32c::Mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8
  CHECK(MaskCrc(0) == 0xa282ead8u);
  CHECK(MaskCrc(0xE3069283u) == (((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u));
  for (uint32_t c : {0u, 1u, 0xdeadbeefu, 0xffffffffu}) CHECK(UnmaskCrc(MaskCrc(c)) == c);
  // The first 12 bytes of a TF-written file with a 16-byte first record (length 16):
  // masked_crc32c of the little-endian length 16.
  const uint8_t len16[8] = {16, 0, 0, 0, 0, 0, 0, 0};
  CHECK(MaskedCrc32c(len16, 8) == MaskCrc(Crc32c(len16, 8)));
}
