// SyntheticRng: the synthetic fleet's random numbers. xoshiro256** seeded
// through SplitMix64, with its own integer and real mappings, so that a seed
// gives the same fleet on every platform and standard library (std::
// distributions differ between implementations).
#ifndef BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_RNG_H_
#define BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_RNG_H_

#include <cstdint>

namespace bubblewatch {

// SplitMix64's step: a good 64-bit mixer for deriving seeds.
inline uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class SyntheticRng {
 public:
  explicit SyntheticRng(uint64_t seed) {
    for (uint64_t& word : s_) word = SplitMix64(&seed);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1).
  double Real() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

  // Uniform integer in [lo, hi]. REQUIRES: lo <= hi.
  int64_t Uniform(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<int64_t>(Next());  // Full range.
    // Multiply-shift: unbiased enough for workload shapes.
    const unsigned __int128 product =
        static_cast<unsigned __int128>(Next()) * span;
    return lo + static_cast<int64_t>(product >> 64);
  }

  // Uniform real in [lo, hi).
  double Between(double lo, double hi) { return lo + (hi - lo) * Real(); }

  bool Chance(double p) { return Real() < p; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace bubblewatch

#endif  // BUBBLEWATCH_INGEST_SYNTHETIC_SYNTHETIC_RNG_H_
