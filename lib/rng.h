// rng.h: the one PRNG of the project and its distributions, written out so
// that every standard library gives the same numbers (std:: distributions
// differ between libstdc++, libc++ and MSVC). std::mt19937_64's output is fixed
// by the C++ standard; everything below uses only integer ops and exact float
// scaling, except lognormal (std::exp/std::log, correctly rounded on glibc).
#pragma once
#include <cmath>
#include <cstdint>
#include <random>

namespace pb {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  uint64_t next() { return gen_(); }
  // Uniform integer in [lo, hi] (inclusive), by rejection: no modulo bias.
  int64_t uniform_int(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<int64_t>(next());
    const uint64_t limit = UINT64_MAX - UINT64_MAX % span;
    uint64_t x;
    do x = next(); while (x >= limit);
    return lo + static_cast<int64_t>(x % span);
  }
  // Uniform float in [0, 1): the top 24 bits, exactly representable.
  float uniform01() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  // Uniform float in [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform01(); }
  // Standard normal by Box-Muller on doubles from 53-bit uniforms.
  double normal() {
    double u1 = (static_cast<double>(next() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t mix(uint64_t z) {  // splitmix64 finaliser
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::mt19937_64 gen_;

 public:
  // Rng seeded for `purpose` from the scenario seed: Rng::for_purpose(seed, 3).
  static Rng for_purpose(uint64_t seed, uint64_t purpose) { return Rng(mix(seed ^ mix(purpose))); }
};

// Purposes (fixed numbers: changing one changes every generated input).
enum RngPurpose : uint64_t {
  kRngStreams = 1,   // generator stream lengths
  kRngBlocks = 2,    // physical block permutation
  kRngTensors = 3,   // layer tensors (per layer: kRngTensors * 1000 + layer)
  kRngSample = 4,    // reference row sampling
  kRngInvariance = 5,  // the streams the invariance check runs alone
};

}  // namespace pb
