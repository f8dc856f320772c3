// gpu_clocks.cpp: NVML through dlopen (gpu_clocks.h). The NVML header is not
// guaranteed on the build machine, so the few prototypes and constants used are
// declared here as NVML documents them (nvml.h, API v2 names where versioned).
#include "gpu_clocks.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

namespace pb {

namespace {

// From nvml.h: nvmlReturn_t NVML_SUCCESS = 0; nvmlClockType_t GRAPHICS 0, SM 1, MEM 2;
// NVML_TEMPERATURE_GPU = 0.
using nvmlDevice_t = void*;
using nvmlReturn_t = int;
constexpr int kClockSm = 1, kClockMem = 2, kTemperatureGpu = 0;
using InitFn = nvmlReturn_t (*)();
using HandleFn = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);
using ClockFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned*);
using TempFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned*);
using PowerFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*);
using ReasonsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using ErrorFn = const char* (*)(nvmlReturn_t);

// nvmlClocksEventReasons (formerly ClocksThrottleReasons) bits, from nvml.h.
struct Reason {
  uint64_t bit;
  const char* name;
};
constexpr Reason kReasons[] = {
    {0x1, "gpu_idle"},
    {0x2, "applications_clocks_setting"},
    {0x4, "sw_power_cap"},
    {0x8, "hw_slowdown"},
    {0x10, "sync_boost"},
    {0x20, "sw_thermal_slowdown"},
    {0x40, "hw_thermal_slowdown"},
    {0x80, "hw_power_brake_slowdown"},
    {0x100, "display_clock_setting"},
};

void* symbol(void* lib, const char* name) { return lib ? dlsym(lib, name) : nullptr; }

}  // namespace

std::vector<std::string> decode_throttle_reasons(uint64_t bits) {
  std::vector<std::string> out;
  for (int b = 0; b < 64; ++b) {
    const uint64_t bit = uint64_t(1) << b;
    if (!(bits & bit)) continue;
    const char* name = nullptr;
    for (const Reason& r : kReasons)
      if (r.bit == bit) name = r.name;
    if (name && (bit == 0x1 || bit == 0x2)) continue;  // idle, application clocks: not throttling
    out.push_back(name ? name : fmt::format("bit{}", b));
  }
  return out;
}

ClockSnapshot read_gpu_clocks(const char* library) {
  ClockSnapshot c;
  dlerror();
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    c.unavailable_why = e ? e : "dlopen failed";
    return c;
  }
  auto init = reinterpret_cast<InitFn>(symbol(lib, "nvmlInit_v2"));
  auto handle = reinterpret_cast<HandleFn>(symbol(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto clock = reinterpret_cast<ClockFn>(symbol(lib, "nvmlDeviceGetClockInfo"));
  auto max_clock = reinterpret_cast<ClockFn>(symbol(lib, "nvmlDeviceGetMaxClockInfo"));
  auto temp = reinterpret_cast<TempFn>(symbol(lib, "nvmlDeviceGetTemperature"));
  auto power = reinterpret_cast<PowerFn>(symbol(lib, "nvmlDeviceGetPowerUsage"));
  auto reasons = reinterpret_cast<ReasonsFn>(symbol(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
  if (!reasons) reasons = reinterpret_cast<ReasonsFn>(symbol(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
  auto error = reinterpret_cast<ErrorFn>(symbol(lib, "nvmlErrorString"));
  auto why = [&](const char* call, nvmlReturn_t r) {
    return fmt::format("{}: {}", call, error ? error(r) : fmt::format("error {}", r));
  };
  if (!init || !handle || !clock || !max_clock) {
    c.unavailable_why = fmt::format("{} lacks nvmlInit_v2/nvmlDeviceGetHandleByIndex_v2/nvmlDeviceGetClockInfo", library);
    return c;  // the library stays loaded: NVML is not meant to be unloaded mid-process
  }
  // nvmlInit is reference counted; one init for the process is enough.
  static std::once_flag once;
  static nvmlReturn_t init_result = 0;
  std::call_once(once, [&] { init_result = init(); });
  if (init_result != 0) {
    c.unavailable_why = why("nvmlInit_v2", init_result);
    return c;
  }
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t r = handle(0, &dev); r != 0) {
    c.unavailable_why = why("nvmlDeviceGetHandleByIndex_v2", r);
    return c;
  }
  c.available = true;
  clock(dev, kClockSm, &c.sm_mhz);
  clock(dev, kClockMem, &c.mem_mhz);
  max_clock(dev, kClockSm, &c.sm_max_mhz);
  max_clock(dev, kClockMem, &c.mem_max_mhz);
  if (temp) temp(dev, kTemperatureGpu, &c.temperature_c);
  unsigned mw = 0;
  if (power && power(dev, &mw) == 0) c.power_w = mw / 1000.0;
  unsigned long long bits = 0;
  if (reasons && reasons(dev, &bits) == 0) c.throttle_bits = bits;
  c.throttle = decode_throttle_reasons(c.throttle_bits);
  return c;
}

std::string clocks_line(const ClockSnapshot& c) {
  if (!c.available) return "nvml: unavailable (" + c.unavailable_why + ")";
  std::string s = fmt::format("sm {}/{} MHz, mem {}/{} MHz, {} C, {:.0f} W", c.sm_mhz, c.sm_max_mhz, c.mem_mhz,
                              c.mem_max_mhz, c.temperature_c, c.power_w);
  if (!c.throttle.empty()) {
    s += ", throttled:";
    for (const std::string& t : c.throttle) s += " " + t;
  }
  return s;
}

}  // namespace pb
