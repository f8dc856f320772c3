// resource_ceiling_test.cpp: the device-memory ceiling is the device's own free
// memory when a CUDA device reports it, the 16 GB assumption only without one, and
// --max-memory overrides both.
#include <gtest/gtest.h>

#include <string>

#include "lib/input_error.h"
#include "lib/resource_estimate.h"
#include "lib/run.h"
#include "lib/scenario.h"

namespace pb {
namespace {

TEST(ResourceCeiling, DeviceFreeMemoryIsTheDeviceCeiling) {
  const Scenario s = parse_scenario(
      "name: t\nseed: 1\nmodel: {num_q_heads: 4, num_kv_heads: 2, head_dim: 64, block_size: 16}\n"
      "layers: {pattern: [attn]}\nstreams:\n  - tokens: 64\n",
      "t.yaml");
  ResourceLimits lim;
  lim.backend = "cuda";
  EXPECT_NO_THROW(validate_resources(s, lim));  // a few MB: under the 16 GB assumed
  lim.device_free_bytes = 1000;                 // a device with 1 kB free
  try {
    validate_resources(s, lim);
    ADD_FAILURE() << "a batch larger than the device's free memory was not refused";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("free on the CUDA device"), std::string::npos) << e.what();
  }
  lim.max_memory_bytes = 1e9;  // --max-memory 1 wins over the device's figure
  EXPECT_NO_THROW(validate_resources(s, lim));
}

}  // namespace
}  // namespace pb
