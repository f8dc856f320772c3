// bf16.h: the bfloat16 storage type shared by host code, the reference and the
// kernels' host-side launch wrappers. Bit layout equals __nv_bfloat16; float ->
// bf16 rounds to nearest even, NaN stays a (quiet) NaN, so host and device agree.
#pragma once
#include <cstdint>
#include <cstring>

namespace pb {

struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");

inline float to_float(bf16 h) {
  uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  bf16 h;
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    h.bits = static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    return h;
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  h.bits = static_cast<uint16_t>(u >> 16);
  return h;
}

// Rounds a float through bf16 and back: "what the kernel stores".
inline float round_bf16(float f) { return to_float(to_bf16(f)); }

// The poison value of the paged KV cache: a quiet NaN.
constexpr uint16_t kBf16PoisonBits = 0x7fc1;
constexpr uint16_t kBf16OutputPoisonBits = 0x7fd3;  // outputs before a kernel writes them

}  // namespace pb
