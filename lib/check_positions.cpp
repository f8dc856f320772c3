// check_positions.cpp: the positions check: T/H/W read where the metadata says
// they are (as a kernel would) equal the scenario's positions token by token;
// image tokens under MRoPE must not have H/W aliased to T.
#include <fmt/format.h>

#include <cstring>

#include "checks.h"

namespace pb {

void check_positions(const Batch& batch, bool mrope, const StagedImage& img,
                     const std::vector<uint8_t>& scratch, uint64_t scratch_base, CheckResult& r) {
  const BatchedAttnMetadata& m = img.meta;
  const uint64_t addr[3] = {m.positions_stacked, m.positions_h_stacked, m.positions_w_stacked};
  const char* names[3] = {"T", "H", "W"};
  const size_t T = batch.total_tokens;
  for (int s = 0; s < 3; ++s)
    if (addr[s] < scratch_base || addr[s] - scratch_base + 4 * T > scratch.size()) {
      r.fail(-1, -1, fmt::format("positions {} array lies outside the scratch buffer", names[s]));
      return;
    }
  auto staged = [&](int s, size_t row) {
    uint32_t v;
    std::memcpy(&v, &scratch[addr[s] - scratch_base + 4 * row], 4);
    return v;
  };
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    long long wrong[3] = {0, 0, 0};
    std::string first;
    for (int i = 0; i < st.count; ++i) {
      const uint32_t want[3] = {st.pos_t[i], st.pos_h[i], st.pos_w[i]};
      for (int s = 0; s < 3; ++s) {
        const uint32_t got = staged(s, st.row_begin + i);
        if (got == want[s]) continue;
        if (!wrong[0] && !wrong[1] && !wrong[2])
          first = fmt::format("token {} (row {}{}): {} expected {}, found {}", i, st.row_begin + i,
                              want[1] != want[0] || want[2] != want[0] ? ", image" : "", names[s],
                              want[s], got);
        ++wrong[s];
      }
    }
    if (wrong[0] || wrong[1] || wrong[2])
      r.fail(-1, b, fmt::format("stream {} (chunk_start {}, {} tokens{}): {} T, {} H, {} W positions "
                                "differ{}; first {}", b, st.chunk_start, st.count,
                                st.has_image ? ", has image" : "", wrong[0], wrong[1], wrong[2],
                                mrope && st.has_image && !wrong[0] ? " (H/W aliased to T on image tokens?)" : "",
                                first));
  }
}

}  // namespace pb
