// checks_test.cpp: the checks no injected fault reaches directly: determinism
// (a race is not something we can inject on purpose in a kernel, so the check
// itself is shown to fail on a moving result and pass on a repeated one) and
// the numeric rule's edges (NaN always fails; the limit tracks the
// same-precision reference's own error). Then the findings that tell bugs
// apart: output never written vs poisoned KV read, counts named for what they
// count, and the MRoPE section whose positions a kernel got wrong. And buffer_guard:
// what it names for a changed input and for a write outside a buffer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "lib/checks.h"
#include "lib/diff_stats.h"
#include "lib/run.h"
#include "test_util.h"

namespace pb {
namespace {

LayerOutputs outputs(float x) {
  LayerOutputs o;
  o.out = {to_bf16(1.0f), to_bf16(x)};
  o.h_state = {{0.5f, x}};
  return o;
}

TEST(Determinism, PassesOnIdenticalRuns) {
  CheckResult r;
  check_determinism(3, outputs(2.0f), outputs(2.0f), r);
  EXPECT_TRUE(r.passed);
}

TEST(Determinism, FailsOnAMovingResultAndNamesIt) {
  CheckResult r;
  check_determinism(3, outputs(2.0f), outputs(2.015625f), r);
  ASSERT_FALSE(r.passed);
  EXPECT_EQ(r.findings[0].layer, 3);
  EXPECT_NE(r.findings[0].message.find("out: 1 element(s) differ"), std::string::npos);
  EXPECT_NE(r.findings[1].message.find("stream 0 h_state"), std::string::npos);
}

TEST(Determinism, NamesTheFirstMovingOutputRowAndItsStream) {
  Batch b;
  b.num_streams = 2;
  b.total_tokens = 2;  // out [T 2, 1]: one element a token
  b.streams.resize(2);
  b.streams[1].row_begin = 1;
  b.streams[0].count = b.streams[1].count = 1;
  CheckResult r;
  check_determinism(0, outputs(2.0f), outputs(2.015625f), r, "between the checked run and the rerun", &b);
  ASSERT_FALSE(r.passed);
  EXPECT_EQ(r.findings[0].stream, 1);
  EXPECT_EQ(r.findings[0].message, "out: 1 element(s) differ between the checked run and the rerun; the first at "
                                   "token row 1 (stream 1) element 0: 0x4000 then 0x4001");
}

TEST(NumericRule, LimitIsFactorTimesLowPrecisionDriftPlusAtol) {
  DiffStats d;
  d.add(1.01, 1.0, 1.004);  // backend off by 0.01, same-precision reference by 0.004
  const Figure f = d.figure(0, 0, "out", Tolerance{2.0, 1e-5});
  EXPECT_NEAR(f.limit, 0.00801, 1e-12);
  EXPECT_FALSE(f.pass);
  const Figure g = d.figure(0, 0, "out", Tolerance{3.0, 1e-5});
  EXPECT_TRUE(g.pass);
}

TEST(NumericRule, NanAlwaysFails) {
  DiffStats d;
  d.add(std::nan(""), 1.0, 1.0);
  d.add(1.0, 1.0, 1.0);
  const Figure f = d.figure(0, 0, "out", Tolerance{1e9, 1e9});
  EXPECT_EQ(f.nonfinite, 1);
  EXPECT_FALSE(f.pass);
}

std::string all(const CheckResult& r) {
  std::string s;
  for (const Finding& f : r.findings) s += f.message + "\n";
  return s;
}

bool has(const CheckResult& r, const std::string& text) { return all(r).find(text) != std::string::npos; }

RunResult run(const char* scenario, std::initializer_list<Fault> faults) {
  RunOptions opt;
  opt.backend = "host";
  opt.repeat = 2;
  for (Fault f : faults) opt.inject.add(f);
  return run_scenario(load_scenario(pb::test::source_dir() + "/scenarios/" + scenario + ".yaml"), opt);
}

TEST(OutputPoison, DiffersFromKvPoisonAndIsANaN) {
  EXPECT_NE(kBf16OutputPoisonBits, kBf16PoisonBits);
  EXPECT_TRUE(std::isnan(to_float(bf16{kBf16OutputPoisonBits})));
  // A NaN computed from KV poison never comes out as the output poison.
  EXPECT_NE(to_bf16(to_float(bf16{kBf16PoisonBits}) * 0.5f + 1.0f).bits, kBf16OutputPoisonBits);
}

TEST(OutputPoison, RowsNeverWrittenAreTheirOwnFindingNotPoisonedKv) {
  const RunResult clean = run("smoke", {});
  EXPECT_TRUE(clean.passed());
  const RunResult r = run("smoke", {Fault::grid_short_by_one});
  const CheckResult& numeric = *r.check(kCheckNumeric);
  ASSERT_FALSE(numeric.passed);
  EXPECT_TRUE(has(numeric, "stream 2 (kv_len 1): 1 of 1 attention output rows never written")) << all(numeric);
  EXPECT_TRUE(has(numeric, "gdn output rows never written")) << all(numeric);
  EXPECT_TRUE(has(numeric, "output poison 0x7fd3")) << all(numeric);
  // Not a causal finding: nothing read poisoned KV.
  EXPECT_TRUE(r.check(kCheckCausalBound)->passed) << all(*r.check(kCheckCausalBound));
  bool counted = false;
  for (const Figure& f : numeric.figures)
    if (f.stream == 2 && f.layer == 0) {
      EXPECT_EQ(f.never_written, f.elements);
      EXPECT_EQ(figure_counts(f), fmt::format("{0} never written, {0} nonfinite of {0}", f.elements));
      counted = true;
    }
  EXPECT_TRUE(counted);
}

TEST(OutputPoison, PoisonedKvReadIsCausalNotNeverWritten) {
  const RunResult r = run("smoke", {Fault::kv_lens_max});
  const CheckResult& causal = *r.check(kCheckCausalBound);
  ASSERT_FALSE(causal.passed);
  EXPECT_TRUE(has(causal, "output rows NaN where the reference is finite")) << all(causal);
  EXPECT_FALSE(has(*r.check(kCheckNumeric), "never written")) << all(*r.check(kCheckNumeric));
  for (const Figure& f : causal.figures) {
    EXPECT_EQ(f.never_written, 0);
    if (!f.pass) EXPECT_GT(f.read_poison, 0);
  }
}

TEST(FigureCounts, NameWhatTheyCount) {
  Figure f;
  f.elements = 768;
  EXPECT_EQ(figure_counts(f), "");
  f.mismatched = 764;
  EXPECT_EQ(figure_counts(f), "764 mismatched of 768");
  f.mismatched = 0;
  f.nonfinite = 12;
  f.never_written = 12;
  EXPECT_EQ(figure_counts(f), "12 never written, 12 nonfinite of 768");
  // A wrong KV write is counted as mismatched slots, not as non-finite values.
  const RunResult r = run("smoke", {Fault::slot_off_by_one});
  long long mismatched = 0;
  for (const Figure& k : r.check(kCheckKvWrite)->figures) {
    EXPECT_EQ(k.nonfinite, 0) << k.what;
    mismatched += k.mismatched;
  }
  EXPECT_GT(mismatched, 0);
}

TEST(RopeSections, SectionGivenTheWrongPositionsIsNamed) {
  const RunResult clean = run("mrope-interleaved", {});
  EXPECT_TRUE(clean.check(kCheckPositions)->passed) << all(*clean.check(kCheckPositions));
  const RunResult r = run("mrope-interleaved", {Fault::mrope_section_swap});
  const CheckResult& p = *r.check(kCheckPositions);
  ASSERT_FALSE(p.passed);
  EXPECT_TRUE(has(p, "the H section (rotary frequencies 1, 4, ..., 58, dims i and i + 64) of the roped keys "
                     "uses wrong positions")) << all(p);
  EXPECT_TRUE(has(p, "of them fit the W positions")) << all(p);
  EXPECT_TRUE(has(p, "the W section (rotary frequencies 2, 5, ..., 59")) << all(p);
  EXPECT_FALSE(has(p, "the T section")) << all(p);
  // The staged arrays are right: the metadata check passes, so only the applied
  // rotation shows where the bug is.
  EXPECT_TRUE(r.check(kCheckMetadata)->passed) << all(*r.check(kCheckMetadata));
}

TEST(RopeSections, ContiguousSectionAndStagedAliasAreNamed) {
  const RunResult r = run("mrope-image", {Fault::mrope_section_swap});
  EXPECT_TRUE(has(*r.check(kCheckPositions), "the H section (rotary dims 16..39 and 80..103)"))
      << all(*r.check(kCheckPositions));
  // H/W staged as T on image tokens: the applied rotation fits the T positions.
  const RunResult a = run("mrope-image", {Fault::mrope_hw_alias});
  EXPECT_TRUE(has(*a.check(kCheckPositions), "of them fit the T positions")) << all(*a.check(kCheckPositions));
}

// Plain RoPE (one T section): keys stored with every position one too far, as a
// kernel that rotates with the cache index + 1 would, against the same keys right.
TEST(RopeSections, PlainRopeOffByOnePositionIsNamed) {
  const Scenario s = load_scenario(pb::test::source_dir() + "/scenarios/smoke.yaml");
  const Batch batch = generate_batch(s);
  const LayerShape shape = layer_shape(s, batch);
  const AttnReference good = attention_reference(batch, shape, 0, 1, s.seed);
  LayerOutputs out;
  out.k_cache = good.k_cache;
  out.v_cache = good.v_cache;
  CheckResult ok;
  check_rope_sections(batch, shape, 0, out, ok);
  EXPECT_TRUE(ok.passed) << all(ok);

  Batch shifted = batch;
  for (uint32_t& p : shifted.streams[1].pos_t) p += 1;
  shifted.streams[1].pos_h = shifted.streams[1].pos_w = shifted.streams[1].pos_t;
  out.k_cache = attention_reference(shifted, shape, 0, 1, s.seed).k_cache;
  CheckResult r;
  check_rope_sections(batch, shape, 0, out, r);
  ASSERT_FALSE(r.passed);
  EXPECT_EQ(r.findings[0].stream, 1);
  EXPECT_TRUE(has(r, fmt::format("the T section (rotary dims 0..31 and 32..63) of the roped keys uses wrong "
                                 "positions on {} of {}", batch.streams[1].count, batch.total_tokens)))
      << all(r);
  EXPECT_TRUE(has(r, "fit none of the token's T/H/W positions")) << all(r);
}

// buffer_guard, on the check itself: inputs read back as uploaded and untouched
// guard zones pass; one changed input element is named with its tensor, stream and
// token row; a write just past a buffer's end or before its start is named with
// the buffer, the side and the token row it would be.
Batch two_stream_batch() {
  Batch b;
  b.num_streams = 2;
  b.total_tokens = 3;
  b.streams.resize(2);
  b.streams[0].row_begin = 0;
  b.streams[0].count = 1;
  b.streams[1].row_begin = 1;
  b.streams[1].count = 2;
  LayerInputs li;
  li.kind = LayerKind::attn;
  for (int i = 0; i < 6; ++i) li.attn.q.push_back(to_bf16(0.25f * i));  // [T 3, 1 head, 2]
  li.attn.k = li.attn.v = li.attn.q;
  b.layers = {li};
  return b;
}

GuardZones untouched_zones(const char* name, size_t bytes, size_t row_bytes) {
  GuardZones z{name, bytes, row_bytes, std::vector<uint8_t>(kBufferGuardBytes), std::vector<uint8_t>(kBufferGuardBytes)};
  for (size_t i = 0; i < kBufferGuardBytes; i += 2) {
    std::memcpy(&z.front[i], &kBufferGuardBits, 2);
    std::memcpy(&z.rear[i], &kBufferGuardBits, 2);
  }
  return z;
}

BatchedAttnMetadata host_copies() {
  BatchedAttnMetadata m;
  m.cu_seqlens_host = {0, 1, 3};
  m.kv_lens_host = {1, 2};
  return m;
}

TEST(BufferGuard, NamesAChangedHostCopy) {
  const Batch b = two_stream_batch();
  BatchedAttnMetadata given = host_copies();
  given.kv_lens_host[1] = 7;
  CheckResult r;
  check_buffer_guard(b, 0, b.layers[0], host_copies(), given, {}, r);
  ASSERT_FALSE(r.passed);
  EXPECT_TRUE(has(r, "metadata host copy kv_lens_host is read-only, and the layer changed it: entry 1 was given as 2, "
                     "found 7")) << all(r);
}

// prepare's contract: only its workspace. Unchanged outputs, caches and states pass;
// one changed h_state element is named with its buffer, stream, element and bits.
TEST(BufferGuard, PrepareMayWriteOnlyItsWorkspace) {
  LayerOutputs before;
  before.out.assign(8, bf16{0x7fd3});
  before.conv_state.assign(6, bf16{0});
  before.h_state = {std::vector<float>(4, 0.f), std::vector<float>(4, 0.5f)};
  CheckResult ok;
  check_prepare_writes(2, "prepare_ssm", before, before, ok);
  EXPECT_TRUE(ok.passed) << all(ok);
  LayerOutputs after = before;
  after.h_state[1][3] = 0.25f;
  CheckResult r;
  check_prepare_writes(2, "prepare_ssm", before, after, r);
  ASSERT_FALSE(r.passed);
  EXPECT_TRUE(has(r, "prepare_ssm wrote h_state of stream 1: 1 of 4 elements changed, the first at element 3 "
                     "(0x3f000000 (0.5) -> 0x3e800000 (0.25))")) << all(r);
  EXPECT_EQ(r.findings.size(), 1u);
}

TEST(BufferGuard, PassesOnUntouchedInputsAndZones) {
  const Batch b = two_stream_batch();
  CheckResult r;
  check_buffer_guard(b, 0, b.layers[0], host_copies(), host_copies(), {untouched_zones("out", 12, 4)}, r);
  EXPECT_TRUE(r.passed) << all(r);
}

TEST(BufferGuard, NamesTheChangedInputItsStreamAndRow) {
  const Batch b = two_stream_batch();
  LayerInputs now = b.layers[0];
  now.attn.k[5] = to_bf16(9.0f);  // token row 2 (stream 1), element 1
  CheckResult r;
  check_buffer_guard(b, 0, now, host_copies(), host_copies(), {}, r);
  ASSERT_FALSE(r.passed);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].stream, 1);
  EXPECT_TRUE(has(r, "input k [T, num_kv_heads, head_dim] is read-only, and the layer changed 1 of its elements in "
                     "stream 1's rows: first at token row 2 element 1")) << all(r);
}

TEST(BufferGuard, NamesAWritePastTheEndOrBeforeTheStart) {
  const Batch b = two_stream_batch();
  GuardZones out = untouched_zones("out", 12, 4);
  out.rear[4] = 0;  // row 4 of a 3-row buffer
  GuardZones ws = untouched_zones("workspace", 256, 0);
  ws.front[kBufferGuardBytes - 1] = 0;  // the byte just before the start
  CheckResult r;
  check_buffer_guard(b, 0, b.layers[0], host_copies(), host_copies(), {out, ws}, r);
  ASSERT_FALSE(r.passed);
  EXPECT_TRUE(has(r, "out (12 bytes): 1 bytes of the guard zone after it changed, 4 to 4 bytes past its end (token "
                     "row 4; the buffer holds rows 0 to 2)")) << all(r);
  EXPECT_TRUE(has(r, "workspace (256 bytes): 1 bytes of the guard zone before it changed, 0 to 0 bytes before its "
                     "start")) << all(r);
}

TEST(BufferGuard, FaultsTripItAndOnlyThroughTheirBuffers) {
  const RunResult past = run("smoke", {Fault::out_row_past_end});
  const CheckResult& g = *past.check(kCheckBufferGuard);
  ASSERT_FALSE(g.passed);
  EXPECT_TRUE(has(g, "out (")) << all(g);
  EXPECT_TRUE(has(g, "past its end (token row 64; the buffer holds rows 0 to 63)")) << all(g);
  EXPECT_FALSE(has(g, "input")) << all(g);
  const RunResult in_place = run("smoke", {Fault::inputs_in_place});
  const CheckResult& h = *in_place.check(kCheckBufferGuard);
  ASSERT_FALSE(h.passed);
  EXPECT_TRUE(has(h, "input q ")) << all(h);
  EXPECT_TRUE(has(h, "input x ")) << all(h);
  EXPECT_FALSE(has(h, "guard zone")) << all(h);
}

}  // namespace
}  // namespace pb
