// bench_protocol.h: the timing protocol device-bench holds ours and the peers (PyTorch, fla) to,
// as values, and the parsing of its four flags out of a benchmark program's argv.
// (bench/cuda_bench_util.h times launches under it; scripts/peer_protocol.py's time_loop is
// its twin for the Python peers, and scripts/device-bench.sh passes all of them the same flags.)
// rest_ms: idle time before a benchmark's warm-ups; warmup: untimed launches; samples:
// timed launches, the figures from their median; l2_cold: an L2 flush (a write of twice
// the L2 size, outside the two events) before each sample.
// Invariant: parse_bench_protocol removes exactly the flags it reads (each with its
// value) and keeps every other argument in order, so Google Benchmark sees the rest.
#pragma once
#include <cstdlib>
#include <cstring>
#include <string>

struct BenchProtocol {
  int rest_ms = 250;
  int warmup = 3;
  int samples = 20;
  bool l2_cold = true;
};

inline BenchProtocol& bench_protocol() {
  static BenchProtocol p;
  return p;
}

// Takes --rest-ms N, --warmup N, --samples N and --l2 cold|hot out of argv into p.
// Returns false with a message naming the flag on a missing or bad value (p may then
// hold the flags read before it).
inline bool parse_bench_protocol(int& argc, char** argv, BenchProtocol& p, std::string& error) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const bool known = !std::strcmp(a, "--rest-ms") || !std::strcmp(a, "--warmup") || !std::strcmp(a, "--samples") ||
                       !std::strcmp(a, "--l2");
    if (!known) {
      argv[out++] = argv[i];
      continue;
    }
    if (i + 1 >= argc) {
      error = std::string(a) + " needs a value";
      return false;
    }
    const std::string v = argv[++i];
    if (!std::strcmp(a, "--l2")) {
      if (v != "cold" && v != "hot") {
        error = "--l2 takes cold or hot, not '" + v + "'";
        return false;
      }
      p.l2_cold = v == "cold";
      continue;
    }
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    const long lo = !std::strcmp(a, "--samples") ? 1 : 0;
    if (v.empty() || *end != '\0' || n < lo || n > 100000) {
      error = std::string(a) + " takes an integer from " + std::to_string(lo) + " to 100000, not '" + v + "'";
      return false;
    }
    (!std::strcmp(a, "--rest-ms") ? p.rest_ms : !std::strcmp(a, "--warmup") ? p.warmup : p.samples) = static_cast<int>(n);
  }
  argc = out;
  argv[argc] = nullptr;
  return true;
}
