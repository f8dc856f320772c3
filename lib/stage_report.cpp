// stage_report.cpp: the layout listing of `prefill-bench stage`.
#include "stage_report.h"

#include <fmt/format.h>

#include <cstring>

#include "staging.h"

namespace pb {

namespace {

std::string first_values(const std::vector<uint8_t>& img, size_t at, size_t count, size_t elem,
                         bool is_signed) {
  std::string s;
  const size_t n = std::min<size_t>(count, 8);
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ' ';
    if (elem == 4) {
      uint32_t v;
      std::memcpy(&v, &img[at + 4 * i], 4);
      s += is_signed ? std::to_string(static_cast<int32_t>(v)) : std::to_string(v);
    } else {
      uint64_t v;
      std::memcpy(&v, &img[at + 8 * i], 8);
      s += is_signed ? std::to_string(static_cast<int64_t>(v)) : fmt::format("0x{:x}", v);
    }
  }
  if (count > n) s += " ...";
  return s;
}

}  // namespace

std::string describe_staging(const Scenario& s, FaultSet faults) {
  faults.bits |= s.faults.bits;
  const Batch batch = generate_batch(s);
  const bool mrope = s.model.mrope.enabled;
  const StagedImage img = stage_batch(batch, mrope, static_cast<size_t>(s.scratch_capacity), 0, 0, faults);
  const StagedLayout true_layout = compute_layout(batch.num_streams, batch.total_tokens, mrope);
  std::string out = fmt::format(
      "{}: {} streams, total_tokens {}, chunk_len {}, max_blocks_per_seq {}, block_size {}, "
      "num_blocks {} (poison block {})\n",
      s.name, batch.num_streams, batch.total_tokens, batch.chunk_len, batch.max_blocks_per_seq,
      batch.block_size, batch.num_blocks, batch.poison_block);
  out += fmt::format("staged at off {} of a {}-byte scratch buffer (addresses below are relative: "
                     "scratch base 0, table arena base 0)\n", img.plan.off, img.plan.capacity);
  out += fmt::format("{:<18} {:>10} {:>10} {:>8}  {}\n", "field", "offset", "bytes", "count", "first values");
  for (const FieldSpan& f : true_layout.fields()) {
    const bool is_signed = std::strcmp(f.name, "slots") == 0 || std::strcmp(f.name, "cu_seqlens") == 0 ||
                           std::strcmp(f.name, "kv_lens") == 0;
    out += fmt::format("{:<18} {:>10} {:>10} {:>8}  {}\n", f.name, f.offset, f.bytes, f.count,
                       f.alias ? "(alias of positions: no MRoPE)"
                               : first_values(img.scratch, img.plan.off + f.offset, f.count, f.elem_bytes, is_signed));
  }
  out += fmt::format("staged_bytes {}{}\n", img.meta.staged_bytes,
                     img.meta.staged_bytes != true_layout.staged_bytes
                         ? fmt::format(" (true size {}: a fault is injected)", true_layout.staged_bytes) : "");
  out += fmt::format("h_state_ptrs       {:>10} {:>10} {:>8}  (written per gdn layer)\n",
                     img.plan.h_state_ptrs - img.plan.off, 8 * batch.num_streams, batch.num_streams);
  out += "streams:\n";
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    std::string blocks;
    for (size_t j = 0; j < st.blocks.size() && j < 8; ++j) blocks += (j ? " " : "") + std::to_string(st.blocks[j]);
    if (st.blocks.size() > 8) blocks += " ...";
    out += fmt::format("  {:>4}: chunk_start {:>6} count {:>6} kv_len {:>6} blocks [{}]{}\n", b,
                       st.chunk_start, st.count, st.kv_len, blocks, st.has_image ? " image" : "");
  }
  out += fmt::format("inputs checksum {:016x}\n", batch.inputs_checksum);
  return out;
}

}  // namespace pb
