// Marsaglia and Tsang's ziggurat (J. Stat. Softw. 5(8), 2000), 128 layers: about 99%
// of samples cost one random word, a table lookup and a compare, with no log, sqrt or
// trigonometry (Box-Muller spends most of its time there).
#include "runtime/RandomNormal.h"

#include <algorithm>
#include <cmath>

#include "runtime/ThreadPool.h"

namespace tlc {
namespace {

// Samples per independently seeded chunk: the unit of parallel work.
constexpr size_t kChunk = size_t(1) << 16;

// splitmix64: a full-period generator whose outputs pass BigCrush; seeding one per
// chunk makes any chunk computable on its own.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1]: never 0, so log() is finite.
  double unit() { return (double(next() >> 11) + 1.0) * 0x1.0p-53; }
};

struct Ziggurat {
  uint32_t k[128];  // |hz| below k[i]: the sample lies inside layer i's rectangle
  double w[128];    // scale from a 32-bit integer to x in layer i
  double f[128];    // the density exp(-x^2/2) at each layer's edge

  Ziggurat() {
    const double m1 = 2147483648.0, vn = 9.91256303526217e-3;
    double dn = 3.442619855899, tn = dn;
    double q = vn / std::exp(-0.5 * dn * dn);
    k[0] = uint32_t(dn / q * m1);
    k[1] = 0;
    w[0] = q / m1;
    w[127] = dn / m1;
    f[0] = 1.0;
    f[127] = std::exp(-0.5 * dn * dn);
    for (int i = 126; i >= 1; --i) {
      dn = std::sqrt(-2.0 * std::log(vn / dn + std::exp(-0.5 * dn * dn)));
      k[i + 1] = uint32_t(dn / tn * m1);
      tn = dn;
      f[i] = std::exp(-0.5 * dn * dn);
      w[i] = dn / m1;
    }
  }

  double sample(SplitMix64 &random) const {
    for (;;) {
      uint64_t bits = random.next();
      int32_t hz = int32_t(uint32_t(bits >> 32));
      unsigned layer = unsigned(bits) & 127u;  // independent of hz's bits
      uint32_t magnitude = hz < 0 ? uint32_t(-int64_t(hz)) : uint32_t(hz);
      double x = hz * w[layer];
      if (magnitude < k[layer]) return x;
      if (layer == 0) {  // the tail beyond r, by Marsaglia's method
        const double r = 3.442619855899;
        double tailX, tailY;
        do {
          tailX = -std::log(random.unit()) / r;
          tailY = -std::log(random.unit());
        } while (tailY + tailY < tailX * tailX);
        return hz > 0 ? r + tailX : -r - tailX;
      }
      if (f[layer] + random.unit() * (f[layer - 1] - f[layer]) < std::exp(-0.5 * x * x)) return x;
    }
  }
};

const Ziggurat &ziggurat() {
  static const Ziggurat table;
  return table;
}

} // namespace

void fillNormal(float *data, size_t count, double stddev, uint64_t streamSeed, ThreadPool *pool) {
  const Ziggurat &table = ziggurat();
  size_t chunks = (count + kChunk - 1) / kChunk;
  auto fill = [&](int64_t first, int64_t last) {
    for (int64_t chunk = first; chunk < last; ++chunk) {
      // The chunk-th output of the seed's own stream: unrelated states for neighbouring chunks.
      SplitMix64 random{SplitMix64{streamSeed + uint64_t(chunk) * 0x9e3779b97f4a7c15ull}.next()};
      size_t begin = size_t(chunk) * kChunk, end = std::min(count, begin + kChunk);
      for (size_t i = begin; i < end; ++i) data[i] = float(stddev * table.sample(random));
    }
  };
  if (pool) pool->parallelFor(int64_t(chunks), 1, fill);
  else fill(0, int64_t(chunks));
}

} // namespace tlc
