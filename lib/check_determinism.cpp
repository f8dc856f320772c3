// check_determinism.cpp: two runs of the same layer on the same inputs must be
// bit-identical (a moving result is a race, or a kernel that behaves otherwise
// when timed).
#include <fmt/format.h>

#include "bit_diff.h"
#include "checks.h"

namespace pb {

void check_determinism(int layer, const LayerOutputs& first, const LayerOutputs& again, CheckResult& r,
                       const std::string& which, const Batch* batch) {
  // out [T, ...]: the first differing element's token row and stream, with both values.
  size_t at = 0;
  if (const long long n = count_bit_diff(first.out, again.out, &at)) {
    const size_t T = batch ? static_cast<size_t>(batch->total_tokens) : 0;
    const size_t row_elems = T && first.out.size() % T == 0 ? first.out.size() / T : 0;
    int stream = -1;
    std::string where = fmt::format("element {}", at);
    if (row_elems && n <= static_cast<long long>(first.out.size())) {
      const size_t row = at / row_elems;
      for (int b = 0; b < batch->num_streams; ++b)
        if (row >= size_t(batch->streams[b].row_begin) && row < size_t(batch->streams[b].row_begin + batch->streams[b].count))
          stream = b;
      where = fmt::format("token row {}{} element {}", row, stream >= 0 ? fmt::format(" (stream {})", stream) : "",
                          at % row_elems);
    }
    const std::string values = at < first.out.size() && at < again.out.size()
                                    ? fmt::format(": 0x{:04x} then 0x{:04x}", first.out[at].bits, again.out[at].bits)
                                    : "";
    r.fail(layer, stream, fmt::format("out: {} element(s) differ {}; the first at {}{}", n, which, where, values));
  }
  const struct { const char* what; long long n; } parts[] = {
      {"k_cache", count_bit_diff(first.k_cache, again.k_cache)},
      {"v_cache", count_bit_diff(first.v_cache, again.v_cache)},
      {"conv_state", count_bit_diff(first.conv_state, again.conv_state)},
  };
  for (const auto& p : parts)
    if (p.n) r.fail(layer, -1, fmt::format("{}: {} element(s) differ {}", p.what, p.n, which));
  for (size_t b = 0; b < first.h_state.size() && b < again.h_state.size(); ++b)
    if (long long n = count_bit_diff(first.h_state[b], again.h_state[b]))
      r.fail(layer, static_cast<int>(b), fmt::format("stream {} h_state: {} element(s) differ {}", b, n, which));
}

}  // namespace pb
