// make_sample: writes the bundled sample dataset, shaped like the well-known tf.data MNIST
// example: each record a tf.train.Example with `image` (784 raw bytes, a 28x28x1 uint8 image)
// and `label` (int64 in 0..9), in GZIP-compressed TFRecord shards.
//
// The images are synthetic (a thick stroke pattern per label plus deterministic noise, from a
// SplitMix64 stream), so the data is reproducible byte for byte and needs no download.
//
//   make_sample [--out DIR] [--records N] [--shards K]     (defaults: data/sample, 10000, 4)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "format/example_builder.h"
#include "format/tfrecord_writer.h"

namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string Image(int label, uint64_t& rng) {
  std::string pixels(784, '\0');
  for (int y = 0; y < 28; ++y) {
    for (int x = 0; x < 28; ++x) {
      // A label-dependent ring/bar shape: bright where the pattern is, dim noise elsewhere.
      const int dx = x - 14, dy = y - 14;
      const int r2 = dx * dx + dy * dy;
      const bool ring = r2 > (20 + label * 6) && r2 < (60 + label * 8);
      const bool bar = (label % 2 == 1) && x >= 12 && x <= 15 && y >= 4 && y <= 23;
      const uint8_t noise = static_cast<uint8_t>(SplitMix64(rng) & 0x1f);
      pixels[static_cast<size_t>(y * 28 + x)] = static_cast<char>((ring || bar) ? 255 - noise : noise);
    }
  }
  return pixels;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "data/sample";
  long records = 10000, shards = 4;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: make_sample [--out DIR] [--records N] [--shards K]\n"
                  "Writes the Quickstart's MNIST-shaped sample: N records (default 10000) in K GZIP TFRecord\n"
                  "shards (default 4) under DIR (default data/sample), each record a 784-byte 'image' and an\n"
                  "int64 'label'.\n");
      return 0;
    }
    if (arg == "--out" && i + 1 < argc) out = argv[++i];
    else if (arg == "--records" && i + 1 < argc) records = std::strtol(argv[++i], nullptr, 10);
    else if (arg == "--shards" && i + 1 < argc) shards = std::strtol(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: make_sample [--out DIR] [--records N] [--shards K]\n");
      return 2;
    }
  }
  if (records < 0 || shards < 1) {
    std::fprintf(stderr, "make_sample: --records must be >= 0 and --shards >= 1\n");
    return 2;
  }
  std::filesystem::create_directories(out);
  uint64_t rng = 20261129;
  ringfeed::WriterOptions options;
  options.compression = ringfeed::Compression::kGzip;
  long written = 0;
  for (long s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "mnist-%05ld-of-%05ld.tfrecord.gz", s, shards);
    ringfeed::TFRecordWriter writer(out + "/" + name, options);
    const long n = records / shards + (s < records % shards ? 1 : 0);
    for (long i = 0; i < n; ++i, ++written) {
      const int label = static_cast<int>(SplitMix64(rng) % 10);
      const std::string image = Image(label, rng);
      ringfeed::ExampleBuilder example;
      example.AddBytes("image", {image}).AddInt64("label", {label});
      writer.Write(example.Serialize());
    }
    writer.Close();
  }
  std::printf("make_sample: wrote %ld records in %ld GZIP shards under %s\n", written, shards, out.c_str());
  return 0;
}
