// kernel_abi_test.cpp: the harness side of the kernel ABI: SHA-256 known
// answers (FIPS 180-4), --impl parsing, our host library's options and
// refusals, the schedule reaching the kernels (a same-launch race caught by
// determinism on every run, a clean run passing), and the report recording
// the library. The CLI tests in CMakeLists.txt cover --kernels' refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "lib/backend.h"
#include "lib/input_error.h"
#include "lib/kernel_library.h"
#include "lib/run.h"
#include "lib/sha256.h"
#include "lib/staging.h"
#include "test_util.h"

namespace pb {
namespace {

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million.data(), million.size()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_NE(sha256_hex("abd", 3), sha256_hex("abc", 3));
}

TEST(Sha256, MissingFileThrows) { EXPECT_THROW(sha256_file("/nonexistent/file"), std::runtime_error); }

TEST(Impl, ParsesPairsAndRefusesMalformed) {
  const auto p = parse_impl("attention=fp32,gdn=token");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].first, "attention");
  EXPECT_EQ(p[0].second, "fp32");
  EXPECT_EQ(p[1].first, "gdn");
  EXPECT_EQ(p[1].second, "token");
  EXPECT_TRUE(parse_impl("").empty());
  for (const char* bad : {"attention", "=fp32", "attention=", "attention=fp32,", ",gdn=token"})
    EXPECT_THROW(parse_impl(bad), InputError) << bad;
}

Scenario smoke() { return load_scenario(pb::test::source_dir() + "/scenarios/smoke.yaml"); }

TEST(HostLibrary, RecordedInTheReport) {
  RunOptions opt;
  opt.backend = "host";
  opt.repeat = 2;
  const RunResult r = run_scenario(smoke(), opt);
  EXPECT_TRUE(r.passed());
  EXPECT_EQ(r.library.name, "pb-host");
  EXPECT_EQ(r.library.path, "built-in");
  EXPECT_EQ(r.library.device, "host");
  EXPECT_TRUE(r.library.schedule);
  EXPECT_EQ(r.library.describe, "attention=tiled gdn=recurrent");
  ASSERT_EQ(r.output_checksums.size(), 2u);
  EXPECT_EQ(r.output_checksums[0].size(), 16u);
}

TEST(HostLibrary, RefusesUnknownVariantAndOption) {
  RunOptions opt;
  opt.backend = "host";
  opt.impl = "attention=fp32";
  EXPECT_THROW(run_scenario(smoke(), opt), InputError);
  opt.impl = "softmax=fast";
  EXPECT_THROW(run_scenario(smoke(), opt), InputError);
  opt.impl = "attention=tiled,gdn=recurrent";
  EXPECT_NO_THROW(validate_kernels(opt));
}

// pb-cuda's conv1d variants (init, set_option and describe touch no device):
// stage is the default, window and row selectable, anything else refused with the list.
TEST(CudaLibrary, Conv1dVariants) {
  const pb_kernel_table* t = cuda_kernel_table();
  if (!t) GTEST_SKIP() << "built without CUDA kernels";
  char msg[256] = "", desc[256] = "";
  void* ctx = nullptr;
  ASSERT_EQ(t->init(&ctx, msg, sizeof msg), PB_OK) << msg;
  ASSERT_EQ(t->describe(ctx, desc, sizeof desc), PB_OK);
  EXPECT_NE(std::string(desc).find("conv1d=stage("), std::string::npos) << desc;
  EXPECT_EQ(t->set_option(ctx, "conv1d", "sliding", msg, sizeof msg), PB_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(msg).find("auto, window, row, stage"), std::string::npos) << msg;
  EXPECT_EQ(t->set_option(ctx, "conv1d", "row", msg, sizeof msg), PB_OK) << msg;
  ASSERT_EQ(t->describe(ctx, desc, sizeof desc), PB_OK);
  EXPECT_NE(std::string(desc).find("conv1d=row"), std::string::npos) << desc;
  EXPECT_EQ(t->set_option(ctx, "conv1d", "stage", msg, sizeof msg), PB_OK) << msg;
  ASSERT_EQ(t->describe(ctx, desc, sizeof desc), PB_OK);
  EXPECT_NE(std::string(desc).find("conv1d=stage("), std::string::npos) << desc;
  EXPECT_EQ(t->set_option(ctx, "conv1d", "stage:8", msg, sizeof msg), PB_ERR_UNSUPPORTED);
  EXPECT_EQ(t->set_option(ctx, "conv1d", "window", msg, sizeof msg), PB_OK) << msg;
  ASSERT_EQ(t->describe(ctx, desc, sizeof desc), PB_OK);
  EXPECT_NE(std::string(desc).find("conv1d=window"), std::string::npos) << desc;
  EXPECT_EQ(t->teardown(ctx, msg, sizeof msg), PB_OK);
}

// gdn-state-race: each work item reads its neighbour's state before updating
// its own. The determinism rerun runs the work in reverse, so the race shows
// on every run, not by luck of the thread timing.
// Our CUDA library's warp-specialized attention (--impl attention=ws|ws:cp): taken
// where the device runs sm_90a (wgmma, TMA) and then named by describe(), refused
// with that reason anywhere else; a misspelt variant is refused with the list.
TEST(CudaLibrary, WarpSpecializedAttentionOption) {
  const pb_kernel_table* t = cuda_kernel_table();
  if (!t) GTEST_SKIP() << "built without CUDA";
  void* ctx = nullptr;
  char msg[512] = {};
  ASSERT_EQ(t->init(&ctx, msg, sizeof msg), PB_OK);
  EXPECT_EQ(t->set_option(ctx, "attention", "ws:x", msg, sizeof msg), PB_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(msg).find("ws, ws:cp"), std::string::npos) << msg;
  for (const char* v : {"ws", "ws:cp"}) {
    msg[0] = 0;
    const pb_status st = t->set_option(ctx, "attention", v, msg, sizeof msg);
    if (st == PB_OK) {
      char d[1024] = {};
      ASSERT_EQ(t->describe(ctx, d, sizeof d), PB_OK);
      EXPECT_NE(std::string(d).find(std::string("attention=") + v + "("), std::string::npos) << d;
    } else {
      EXPECT_EQ(st, PB_ERR_UNSUPPORTED);
      EXPECT_NE(std::string(msg).find("compute capability 9.0"), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(t->teardown(ctx, msg, sizeof msg), PB_OK);
}

TEST(Schedule, SameLaunchRaceCaughtEveryRun) {
  for (int i = 0; i < 4; ++i) {
    RunOptions opt;
    opt.backend = "host";
    opt.repeat = 2;
    opt.inject.add(Fault::gdn_state_race);
    const RunResult r = run_scenario(smoke(), opt);
    const CheckResult* det = r.check(kCheckDeterminism);
    ASSERT_TRUE(det && det->ran);
    EXPECT_FALSE(det->passed) << "run " << i << ": the race did not show";
    ASSERT_FALSE(det->findings.empty());
    EXPECT_EQ(det->findings.front().layer, 1);  // the gdn layer
  }
  RunOptions clean;
  clean.backend = "host";
  clean.repeat = 2;
  const RunResult r = run_scenario(smoke(), clean);
  const CheckResult* det = r.check(kCheckDeterminism);
  ASSERT_TRUE(det && det->ran);
  EXPECT_TRUE(det->passed);
}

// Our host library computes the same bytes whatever order the schedule asks for.
TEST(Schedule, HostKernelsOrderIndependent) {
  const Scenario s = smoke();
  const Batch batch = generate_batch(s);
  const LayerShape shape = layer_shape(s, batch);
  auto backend = make_host_backend();
  const StagedLayout L = compute_layout(batch.num_streams, batch.total_tokens, s.model.mrope.enabled);
  const ScratchPlan plan = plan_scratch(L, 0);
  backend->allocate(batch, shape, plan.capacity, plan_table_arena(batch).bytes);
  StagedImage img = stage_batch(batch, s.model.mrope.enabled, 0, backend->scratch_base(), backend->arena_base(), FaultSet{});
  backend->upload_metadata(img.scratch, img.arena);
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<uint64_t> ptrs;
    for (int b = 0; b < batch.num_streams; ++b) ptrs.push_back(backend->h_state_address(layer, b));
    uint64_t sums[2];
    for (uint32_t schedule : {0u, 1u}) {
      backend->reset_layer(layer);
      backend->write_scratch(img.plan.h_state_ptrs, ptrs.data(), 8 * ptrs.size());
      backend->run_layer(layer, img.meta, backend->scratch_base() + img.plan.h_state_ptrs, schedule);
      sums[schedule] = outputs_checksum(backend->read_layer(layer));
    }
    EXPECT_EQ(sums[0], sums[1]) << "layer " << layer;
  }
}

}  // namespace
}  // namespace pb

namespace pb {
namespace {

// Our host kernels survive any bytes in scratch: cu_seqlens out of order and
// past T, kv_lens huge or negative, slots and block ids outside the cache. Every
// read stays in bounds (the ASan build runs this too); nothing throws.
TEST(HostKernels, GarbageMetadataStaysInBounds) {
  const Scenario s = load_scenario(pb::test::source_dir() + "/scenarios/smoke.yaml");
  const Batch batch = generate_batch(s);
  const LayerShape shape = layer_shape(s, batch);
  auto backend = make_host_backend();
  const StagedLayout L = compute_layout(batch.num_streams, batch.total_tokens, s.model.mrope.enabled);
  const ScratchPlan plan = plan_scratch(L, 0);
  backend->allocate(batch, shape, plan.capacity, plan_table_arena(batch).bytes);
  StagedImage img = stage_batch(batch, s.model.mrope.enabled, 0, backend->scratch_base(), backend->arena_base(), FaultSet{});
  const uint64_t base = backend->scratch_base();
  const int N = batch.num_streams, T = batch.total_tokens;
  auto put = [&](uint64_t address, const auto& values) {
    std::memcpy(img.scratch.data() + (address - base), values.data(), values.size() * sizeof(values[0]));
  };
  std::vector<int32_t> cu(N + 1), kv(N);
  for (int b = 0; b <= N; ++b) cu[b] = b % 2 ? T + 1000 : -7 * b;  // out of order, negative, past T
  for (int b = 0; b < N; ++b) kv[b] = b % 2 ? 1 << 30 : -5;
  std::vector<int64_t> slots(T);
  for (int r = 0; r < T; ++r) slots[r] = r % 2 ? -1 : int64_t(1) << 40;
  put(img.meta.cu_seqlens, cu);
  put(img.meta.kv_lens, kv);
  put(img.meta.slot_stacked, slots);
  // Block ids outside the cache in every table.
  std::vector<uint8_t> arena = img.arena;
  for (size_t i = 0; i + 4 <= arena.size(); i += 4) {
    const int32_t bad = static_cast<int32_t>(i % 8 ? 1 << 29 : -3);
    std::memcpy(arena.data() + i, &bad, 4);
  }
  backend->upload_metadata(img.scratch, arena);
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<uint64_t> ptrs;
    for (int b = 0; b < N; ++b) ptrs.push_back(backend->h_state_address(layer, b));
    backend->reset_layer(layer);
    backend->write_scratch(img.plan.h_state_ptrs, ptrs.data(), 8 * ptrs.size());
    for (uint32_t schedule : {0u, 1u})
      EXPECT_NO_THROW(backend->run_layer(layer, img.meta, base + img.plan.h_state_ptrs, schedule)) << layer;
  }
}

}  // namespace
}  // namespace pb
