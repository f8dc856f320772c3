// cuda_backend_test.cpp: the CUDA backend end to end through run_scenario:
// shipped scenarios pass every check, and each backend fault trips its check
// (causal-off-by-one -> causal_bound, conv-state-bleed -> state) on a scenario
// where it can show (fault_exposure). Own main(): without a CUDA device it
// prints "skipped: no CUDA device" and exits 77 (ctest SKIP_RETURN_CODE).
// Usage: cuda_backend_test [SCENARIO.yaml ...]   (default: a few shipped ones)
//        cuda_backend_test --fault-matrix [SCENARIO.yaml ...]   (default: every
//          shipped one): every fault of all_faults() on every scenario where it
//          can show; each must trip its check. Prints the matrix.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "lib/backend.h"
#include "lib/batch.h"
#include "reference/reference.h"
#include "lib/fault_exposure.h"
#include "lib/run.h"
#include "lib/scenario.h"

#ifndef PB_SOURCE_DIR
#define PB_SOURCE_DIR "."
#endif

namespace {

// Shipped scenarios the test runs by default (small, and between them every
// head dim, GQA ratio, block size, MRoPE variant and continuation case).
const char* const kDefaultScenarios[] = {
    "smoke.yaml",           "continuation-chunks.yaml", "block-size-16-odd-heads.yaml",
    "block-size-64.yaml",   "mrope-interleaved.yaml",   "mrope-image.yaml",
    "qwen3-next.yaml",      "long-and-short.yaml",      "decode-heavy.yaml",
};

bool exists(const std::string& p) { return access(p.c_str(), R_OK) == 0; }

// The directory the executable was started from (the bundle's root on the GPU machine).
std::string exe_dir(const char* argv0) {
  const std::string exe = argv0;
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "." : exe.substr(0, slash);
}

// scenarios/: $PB_SCENARIOS, next to the executable (the bundle), or the source tree.
std::string scenario_dir(const char* argv0) {
  if (const char* env = std::getenv("PB_SCENARIOS")) return env;
  const std::string dir = exe_dir(argv0);
  for (const std::string& d : {dir + "/scenarios", dir + "/../scenarios", std::string(PB_SOURCE_DIR) + "/scenarios"})
    if (exists(d + "/smoke.yaml")) return d;
  return std::string(PB_SOURCE_DIR) + "/scenarios";
}

// A GPU test scenario (tests/cuda/NAME): the bundle's tests/ beside the executable, or
// the source tree's.
std::string gpu_scenario(const char* argv0, const std::string& name) {
  for (const std::string& d : {exe_dir(argv0) + "/tests", std::string(PB_SOURCE_DIR) + "/tests/cuda"})
    if (exists(d + "/" + name)) return d + "/" + name;
  return std::string(PB_SOURCE_DIR) + "/tests/cuda/" + name;
}

int g_failures = 0;

void fail(const std::string& what) {
  std::printf("FAIL %s\n", what.c_str());
  ++g_failures;
}

void print_checks(const pb::RunResult& r) {
  for (const pb::CheckResult& c : r.checks) {
    std::printf("    %-14s %s", c.name.c_str(), !c.ran ? "not run" : (c.passed ? "pass" : "FAIL"));
    if (!c.ran) std::printf(" (%s)", c.not_run_why.c_str());
    std::printf("\n");
    int shown = 0;
    for (const pb::Finding& f : c.findings) {
      if (++shown > 3) break;
      std::printf("      layer %d stream %d: %s\n", f.layer, f.stream, f.message.c_str());
    }
  }
  for (const pb::KernelTiming& t : r.timings)
    std::printf("    L%d %-10s median %.4f ms (%d samples)\n", t.layer, t.kernel.c_str(), t.median_ms, t.samples);
}

pb::RunResult run(const pb::Scenario& s, pb::FaultSet inject, int repeat = 2, const std::string& impl = "",
                  bool graph = false) {
  pb::RunOptions opt;
  opt.backend = "cuda";
  opt.impl = impl;
  opt.graph = graph;  // a fault whose check is `graph` shows only on a replay of a second batch
  opt.inject = inject;
  opt.warmup = 0;
  opt.repeat = repeat;  // two runs by default: the determinism check compares them
  return pb::run_scenario(s, opt);
}

void expect_clean(const pb::Scenario& s) {
  const pb::RunResult r = run(s, {});
  std::printf("%s %s (%.2f s)\n", r.passed() ? "ok  " : "FAIL", s.name.c_str(), r.wall_s);
  print_checks(r);
  if (!r.passed()) fail(s.name + ": a check failed without any fault");
}

// The GDN limit follows the kernel's precision (docs/TOLERANCES.md): on a
// scenario with gdn layers the run passes, every gdn figure names the precision
// its limit modelled, and the printed max_abs / lowp over the gdn figures tells
// how well that lp predicts the kernel (expected: median about 1, worst well
// under the factor 2; a median far from 1 means reference/gdn_chunked_lp.cpp no
// longer reproduces the kernel's roundings). `impl`: an --impl selection, whose
// precision every gdn figure must then name (`expected`).
void expect_gdn_precision_named(const pb::Scenario& s, const std::string& impl = "", const char* expected = nullptr) {
  const pb::RunResult r = run(s, {}, 2, impl);
  const pb::CheckResult* c = r.check("numeric");
  std::vector<double> ratios;
  std::string precision;
  int unnamed = 0;
  if (c)
    for (const pb::Figure& f : c->figures) {
      if (f.precision == pb::kAttentionPrecision) continue;
      if (f.precision.empty()) ++unnamed;
      precision = f.precision;
      if (f.lowp_max_abs > 1e-5) ratios.push_back(f.max_abs / f.lowp_max_abs);
    }
  std::sort(ratios.begin(), ratios.end());
  const double median = ratios.empty() ? 0 : ratios[ratios.size() / 2];
  const double worst = ratios.empty() ? 0 : ratios.back();
  const bool ok = r.passed() && !ratios.empty() && unnamed == 0 && (!expected || precision == expected);
  std::printf("%s %s%s%s: gdn limit modelled on '%s'; max_abs / lowp over %zu gdn figures: median %.3f, worst %.3f\n",
              ok ? "ok  " : "FAIL", s.name.c_str(), impl.empty() ? "" : " --impl ", impl.c_str(), precision.c_str(),
              ratios.size(), median, worst);
  if (!ok) {
    print_checks(r);
    fail(s.name + ": gdn figures without a precision, or the run failed");
  }
}

// Runs `fault` on the first scenario where it can show; its check must fail.
void expect_fault(const std::vector<pb::Scenario>& scenarios, pb::Fault fault) {
  const pb::FaultInfo& info = pb::fault_info(fault);
  for (const pb::Scenario& s : scenarios) {
    const pb::Batch batch = pb::generate_batch(s);
    const pb::Exposure e = pb::fault_exposure(fault, s, batch);
    if (!e.can_show) continue;
    pb::FaultSet inject;
    inject.add(fault);
    const pb::RunResult r = run(s, inject, 2, "", pb::fault_needs_graph(fault));
    const pb::CheckResult* c = r.check(info.must_trip);
    const bool tripped = c && c->ran && !c->passed;
    std::printf("%s fault %s on %s: %s %s\n", tripped ? "ok  " : "FAIL", info.name, s.name.c_str(),
                info.must_trip, tripped ? "failed as it must" : "did NOT fail");
    print_checks(r);
    if (!tripped) fail(std::string("fault ") + info.name + " did not trip " + info.must_trip);
    if (r.passed()) fail(std::string("fault ") + info.name + ": the run passed");
    return;
  }
  fail(std::string("fault ") + info.name + ": no scenario where it can show");
}

// The whole fault matrix: one run per (fault, scenario where it can show).
void fault_matrix(const std::vector<pb::Scenario>& scenarios) {
  std::vector<pb::Batch> batches;
  for (const pb::Scenario& s : scenarios) batches.push_back(pb::generate_batch(s));
  std::vector<std::string> rows;
  for (const pb::FaultInfo& info : pb::all_faults()) {
    int shown = 0, tripped_n = 0;
    for (size_t i = 0; i < scenarios.size(); ++i) {
      const pb::Scenario& s = scenarios[i];
      const pb::Exposure e = pb::fault_exposure(info.fault, s, batches[i]);
      if (!e.can_show) {
        std::printf("n/a  %-24s %-26s cannot show: %s\n", info.name, s.name.c_str(), e.why_not.c_str());
        continue;
      }
      ++shown;
      pb::FaultSet inject;
      inject.add(info.fault);
      std::string verdict;
      try {
        const pb::RunResult r = run(s, inject, 1, "", pb::fault_needs_graph(info.fault));
        const pb::CheckResult* c = r.check(info.must_trip);
        const bool tripped = c && c->ran && !c->passed;
        tripped_n += tripped;
        std::string also;
        for (const pb::CheckResult& o : r.checks)
          if (o.ran && !o.passed && o.name != info.must_trip) also += " " + o.name;
        verdict = tripped ? "tripped" : "MISSED";
        std::printf("%-4s %-24s %-26s %s %s%s%s\n", tripped ? "ok" : "FAIL", info.name, s.name.c_str(),
                    info.must_trip, verdict.c_str(), also.empty() ? "" : "; also failed:", also.c_str());
        if (!tripped) fail(std::string("fault ") + info.name + " on " + s.name + " did not trip " + info.must_trip);
      } catch (const std::exception& ex) {
        if (std::string(ex.what()).find("does not apply to library") != std::string::npos) {
          --shown;
          std::printf("n/a  %-24s %-26s %s\n", info.name, s.name.c_str(), ex.what());
          continue;
        }
        std::printf("FAIL %-24s %-26s exception: %s\n", info.name, s.name.c_str(), ex.what());
        fail(std::string("fault ") + info.name + " on " + s.name + ": exception");
      }
    }
    char line[256];
    std::snprintf(line, sizeof line, "%-24s must trip %-14s tripped on %d of %d scenarios where it can show",
                  info.name, info.must_trip, tripped_n, shown);
    rows.push_back(line);
  }
  std::printf("\nfault matrix (cuda backend):\n");
  for (const std::string& r : rows) std::printf("  %s\n", r.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!pb::cuda_device_available(&why)) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  bool matrix = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--fault-matrix") matrix = true;
    else files.push_back(argv[i]);
  }
  if (files.empty()) {
    const std::string dir = scenario_dir(argv[0]);
    if (matrix) {
      std::vector<std::string> all;
      if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d)) {
          const std::string n = e->d_name;
          if (n.size() > 5 && n.compare(n.size() - 5, 5, ".yaml") == 0) all.push_back(dir + "/" + n);
        }
        closedir(d);
      }
      std::sort(all.begin(), all.end());
      files = all;
    } else {
      for (const char* name : kDefaultScenarios)
        if (exists(dir + "/" + name)) files.push_back(dir + "/" + name);
        else std::printf("note: %s/%s not found, skipped\n", dir.c_str(), name);
    }
  }
  try {
    std::vector<pb::Scenario> scenarios;
    for (const std::string& f : files) scenarios.push_back(pb::load_scenario(f));
    if (scenarios.empty()) fail("no scenario to run");
    if (matrix) {
      fault_matrix(scenarios);
    } else {
      for (const pb::Scenario& s : scenarios) expect_clean(s);
      // The default's kernel by shape (kernels/kernel_table.cu): the bf16 split at 8 v heads
      // or fewer (decode-heavy has 4); the chunked walk and its lp where asked for.
      for (const pb::Scenario& s : scenarios)
        if (s.name == "decode-heavy") {
          expect_gdn_precision_named(s, "", pb::gdn_precision_name(pb::GdnPrecision::bf16_chunk64));
          expect_gdn_precision_named(s, "gdn=chunked", pb::gdn_precision_name(pb::GdnPrecision::tf32_chunked));
        }
      for (const pb::Scenario& s : scenarios)  // the context-parallel variant and its own lp
        if (s.name == "decode-heavy" || s.name == "continuation-chunks")
          expect_gdn_precision_named(s, "gdn=split", pb::gdn_precision_name(pb::GdnPrecision::tf32_split));
      for (const pb::Scenario& s : scenarios)  // the bf16 split (fla's arithmetic) and its lp
        if (s.name == "decode-heavy" || s.name == "continuation-chunks" || s.name == "long-and-short")
          expect_gdn_precision_named(s, "gdn=bf16", pb::gdn_precision_name(pb::GdnPrecision::bf16_chunk64));
      // Its scan at four row blocks a CTA co-batched and at two warps a row block alone:
      // the invariance check requires the same bits.
      expect_gdn_precision_named(pb::load_scenario(gpu_scenario(argv[0], "gdn-bf16-scan-shapes.yaml")), "gdn=bf16",
                                 pb::gdn_precision_name(pb::GdnPrecision::bf16_chunk64));
      // Its out pass over two column blocks, the last partial (v_dim 200), short chunks and full.
      expect_gdn_precision_named(pb::load_scenario(gpu_scenario(argv[0], "gdn-bf16-wide-v.yaml")), "gdn=bf16",
                                 pb::gdn_precision_name(pb::GdnPrecision::bf16_chunk64));
      expect_fault(scenarios, pb::Fault::causal_off_by_one);
      expect_fault(scenarios, pb::Fault::conv_state_bleed);
    }
  } catch (const std::exception& e) {
    fail(std::string("exception: ") + e.what());
  }
  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
