// gpu_clocks.h: SM and memory clocks, temperature, power and throttle reasons of
// GPU 0 read through NVML, which is loaded at run time (dlopen), so the binary
// has no link dependency on it: a driver-only machine works, and a machine
// without NVML gets a snapshot that says why ("unavailable (<dlerror>)").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pb {

struct ClockSnapshot {
  bool available = false;
  std::string unavailable_why;  // set when !available
  unsigned sm_mhz = 0, sm_max_mhz = 0, mem_mhz = 0, mem_max_mhz = 0;
  unsigned temperature_c = 0;
  double power_w = 0;
  uint64_t throttle_bits = 0;          // nvmlClocksEventReasons bit mask
  std::vector<std::string> throttle;   // decoded names, idle and none left out
};

// The named throttle reasons in `bits` ("sw_power_cap", "hw_slowdown", ...);
// "gpu_idle" and "applications_clocks_setting" are not throttling and are left
// out; an unknown bit is named "bit<N>".
std::vector<std::string> decode_throttle_reasons(uint64_t bits);

// The state of GPU 0 now. `library` is the NVML to load (tests pass a missing
// one for the unavailable path).
ClockSnapshot read_gpu_clocks(const char* library = "libnvidia-ml.so.1");

// "sm 1980/1980 MHz, mem 3201/3201 MHz, 45 C, 120 W" or "nvml: unavailable (...)".
std::string clocks_line(const ClockSnapshot& c);

}  // namespace pb
