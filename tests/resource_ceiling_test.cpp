// resource_ceiling_test.cpp: the device-memory ceiling is the device's own free
// memory when a CUDA device reports it, the 16 GB assumption only without one, and
// --max-memory overrides both; run --graph's second batch is part of the estimate.
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

// run --graph generates and holds the bucket's second batch: its inputs are estimated too.
TEST(ResourceCeiling, GraphCountsTheSecondBatch) {
  const Scenario s = parse_scenario(
      "name: t\nseed: 1\nmodel: {num_q_heads: 4, num_kv_heads: 2, head_dim: 64, block_size: 16}\n"
      "layers: {pattern: [attn]}\nstreams:\n  - tokens: 64\n",
      "t.yaml");
  ResourceLimits lim;
  const ResourceEstimate eager = validate_resources(s, lim);
  lim.graph = true;
  const ResourceEstimate graph = validate_resources(s, lim);
  double inputs = 0;
  for (const EstimateItem& i : eager.host)
    if (i.what == "generated inputs of every layer") inputs = i.amount;
  ASSERT_GT(inputs, 0);
  EXPECT_DOUBLE_EQ(graph.host_bytes(), eager.host_bytes() + inputs);
  lim.max_memory_bytes = eager.host_bytes() + eager.device_bytes() + inputs / 2;  // room for one batch, not two
  lim.graph = false;
  EXPECT_NO_THROW(validate_resources(s, lim));
  lim.graph = true;
  EXPECT_THROW(validate_resources(s, lim), InputError);
}

}  // namespace
}  // namespace pb
