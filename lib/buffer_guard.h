// buffer_guard.h: the guard zones the harness keeps around every buffer it
// allocates (Backend::alloc), and what the buffer_guard check reads back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pb {

// buffer_guard (docs/DESIGN.md "The checks"). Every buffer the harness allocates
// sits between two guard zones of kBufferGuardBytes holding kBufferGuardBits,
// written once when the buffer is allocated and never again, so a library's write
// just outside a buffer lands in a zone, and a read there gives NaN (0x7fd5 is a
// bf16 NaN, and two of them an f32 NaN).
constexpr size_t kBufferGuardBytes = 64 * 1024;
constexpr uint16_t kBufferGuardBits = 0x7fd5;
// One buffer's guard zones as read back after a layer.
struct GuardZones {
  std::string buffer;    // the ABI argument's name ("out", "k_cache", "workspace", "scratch", ...)
  size_t bytes = 0;      // the buffer's own size
  size_t row_bytes = 0;  // one token row of a [T, ...] tensor, 0 for the others
  std::vector<uint8_t> front, rear;  // kBufferGuardBytes each
};
// Every byte of every zone still kBufferGuardBits.
bool guard_zones_intact(const std::vector<GuardZones>& zones);

}  // namespace pb
