// resource_estimate.h: an up-front estimate of what a scenario's run holds and
// costs (host memory, device memory, reference work), from the resolved streams
// and the model shape alone, in checked 64-bit arithmetic; and the ceilings it is
// held to, so a resource bomb is refused before any allocation (exit 2, located).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scenario.h"

namespace pb {

// One line of the estimate: bytes (or FLOPs) and the scenario field that drives it.
struct EstimateItem {
  std::string what;   // "kv caches (4 per attn layer: initial and live K, V)"
  std::string field;  // "kv_cache.num_blocks", "scratch.capacity_bytes", "streams"
  double amount = 0;
};

struct ResourceEstimate {
  std::vector<EstimateItem> host;    // held in host memory whatever the backend
  std::vector<EstimateItem> device;  // the backend's buffers (host memory on the host backend)
  std::vector<EstimateItem> work;    // reference FLOPs
  double host_bytes() const;
  double device_bytes() const;
  double ref_flops() const;
  // "host 1.2 GB, device 0.4 GB (host backend: 1.6 GB of host memory), reference 3.1 GFLOP"
  std::string summary() const;
};

struct ResourceLimits {
  std::optional<double> max_memory_bytes;  // unset: host MemAvailable, device device_free_bytes
  std::optional<double> device_free_bytes; // the CUDA device's free memory when one is present;
                                           // unset: kDefaultDeviceBytes
  std::optional<double> max_ref_flops;     // unset: kDefaultRefFlops
  std::string backend = "auto";            // "host" or "auto": device buffers count as host memory
  std::optional<int> ref_sample;           // the run's --ref-sample, when given
  bool reference = true;                   // false: no reference runs (run --profile), so its work is not limited
  bool graph = false;                      // run --graph: the bucket's second batch is generated and held too
};

// Device memory assumed when no device reports its own (the smallest common accelerator).
constexpr double kDefaultDeviceBytes = 16.0 * (1ull << 30);
// Reference work allowed by default: a few minutes of the Eigen reference on 2 cores.
constexpr double kDefaultRefFlops = 1000e9;

// Throws a located InputError when a derived size overflows 64 bits or an i32 index.
// graph: run --graph, which also generates and holds the bucket's second batch.
ResourceEstimate estimate_resources(const Scenario& s, const std::vector<StreamSpec>& streams,
                                    int ref_sample, bool graph = false);

// The KV cache's physical block count for these streams: kv_cache.num_blocks, else
// what generate_batch allocates (default_num_blocks, batch.h).
uint64_t planned_num_blocks(const Scenario& s, const std::vector<StreamSpec>& streams);

// Host memory the machine has for us: /proc/meminfo MemAvailable (0 when unknown).
double host_memory_available();

// Throws a located InputError (the field of the largest item) when the estimate
// passes a ceiling; the message names the flag that raises it.
void check_resources(const Scenario& s, const ResourceEstimate& e, const ResourceLimits& limits);

}  // namespace pb
