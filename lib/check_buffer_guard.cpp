// check_buffer_guard.cpp: the buffer guard check. After a layer's runs, (1) its
// read-only inputs (attn q, k, v; gdn x, conv_weight, g, beta) read back equal the
// truth bit for bit, per tensor and stream, and (2) the guard zones around every
// buffer of the layer, scratch and the table arena still hold kBufferGuardBits.
// A library that works in place on an input, or stores a row past the end of an
// output, a state or its workspace, is named here with the buffer, the side and
// the first byte; nothing it touched is trusted for the truth. (3) prepare, which
// runs outside timing, wrote nothing but its workspace (check_prepare_writes).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "bit_diff.h"
#include "checks.h"
#include "metadata.h"

namespace pb {

namespace {

// The stream whose packed rows hold `row`, -1 when none does.
int stream_of_row(const Batch& batch, size_t row) {
  for (int b = 0; b < batch.num_streams; ++b) {
    const StreamTruth& st = batch.streams[b];
    if (row >= static_cast<size_t>(st.row_begin) && row < static_cast<size_t>(st.row_begin + st.count)) return b;
  }
  return -1;
}

std::string value_text(bf16 v) { return fmt::format("0x{:04x} ({:g})", v.bits, to_float(v)); }
std::string value_text(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return fmt::format("0x{:08x} ({:g})", u, v);
}
bool same_bits(bf16 a, bf16 b) { return a.bits == b.bits; }
bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

// One read-only input: a finding per stream whose rows changed (per tensor for one
// without token rows, `row_elems` 0), naming how many elements and the first one.
template <class T>
void compare_input(const Batch& batch, int layer, const char* name, const char* layout, size_t row_elems,
                   const std::vector<T>& truth, const std::vector<T>& now, CheckResult& r) {
  if (now.size() != truth.size()) {
    r.fail(layer, -1, fmt::format("input {} read back {} elements, the upload held {}", name, now.size(), truth.size()));
    return;
  }
  struct Hit {
    size_t count = 0, first = 0;
  };
  std::vector<Hit> per_stream(static_cast<size_t>(batch.num_streams) + 1);  // last: rows of no stream
  for (size_t i = 0; i < truth.size(); ++i) {
    if (same_bits(truth[i], now[i])) continue;
    const int b = row_elems ? stream_of_row(batch, i / row_elems) : -1;
    Hit& h = per_stream[b < 0 ? batch.num_streams : b];
    if (h.count++ == 0) h.first = i;
  }
  for (size_t b = 0; b < per_stream.size(); ++b) {
    const Hit& h = per_stream[b];
    if (!h.count) continue;
    const int stream = b < static_cast<size_t>(batch.num_streams) ? static_cast<int>(b) : -1;
    const std::string where =
        row_elems ? fmt::format("token row {} element {}", h.first / row_elems, h.first % row_elems)
                  : fmt::format("element {}", h.first);
    r.fail(layer, stream,
           fmt::format("input {} {} is read-only, and the layer changed {} of its elements{}: first at {}, uploaded "
                       "{}, found {}",
                       name, layout, h.count, stream >= 0 ? fmt::format(" in stream {}'s rows", stream) : "", where,
                       value_text(truth[h.first]), value_text(now[h.first])));
  }
}

std::string row_span(long long from, long long to) {
  return from == to ? fmt::format("token row {}", from) : fmt::format("token rows {} to {}", from, to);
}

// One guard zone: a finding when any byte left kBufferGuardBits.
void compare_zone(const GuardZones& z, bool rear, int layer, CheckResult& r) {
  const std::vector<uint8_t>& zone = rear ? z.rear : z.front;
  uint8_t pattern[2];
  std::memcpy(pattern, &kBufferGuardBits, 2);  // as Backend::alloc wrote it
  size_t changed = 0, first = 0, last = 0;
  for (size_t i = 0; i < zone.size(); ++i) {
    if (zone[i] == pattern[i % 2]) continue;
    if (changed++ == 0) first = i;
    last = i;
  }
  if (!changed) return;
  // Distances from the buffer's edge: past the end counts up from its last byte,
  // before the start down from its first.
  const size_t near = rear ? first : zone.size() - 1 - last, far = rear ? last : zone.size() - 1 - first;
  std::string rows;
  if (z.row_bytes)
    rows = rear ? fmt::format(" ({}; the buffer holds rows 0 to {})",
                              row_span((z.bytes + near) / z.row_bytes, (z.bytes + far) / z.row_bytes),
                              z.bytes / z.row_bytes - 1)
                : fmt::format(" ({})", row_span(-static_cast<long long>(far / z.row_bytes) - 1,
                                                -static_cast<long long>(near / z.row_bytes) - 1));
  r.fail(layer, -1,
         fmt::format("{} ({} bytes): {} bytes of the guard zone {} it changed, {} to {} bytes {}{}: the layer wrote "
                     "outside the buffer",
                     z.buffer, z.bytes, changed, rear ? "after" : "before", near, far,
                     rear ? "past its end" : "before its start", rows));
}

}  // namespace

bool guard_zones_intact(const std::vector<GuardZones>& zones) {
  CheckResult r;
  for (const GuardZones& z : zones) {
    compare_zone(z, false, -1, r);
    compare_zone(z, true, -1, r);
  }
  return r.passed;
}

void check_buffer_guard(const Batch& batch, int layer, const LayerInputs& now, const BatchedAttnMetadata& staged,
                        const BatchedAttnMetadata& given, const std::vector<GuardZones>& guards, CheckResult& r) {
  const LayerInputs& truth = batch.layers.at(layer);
  const size_t T = static_cast<size_t>(batch.total_tokens);
  auto row = [&](size_t elems) { return T ? elems / T : 0; };
  if (truth.kind == LayerKind::attn) {
    compare_input(batch, layer, "q", "[T, num_q_heads, head_dim]", row(truth.attn.q.size()), truth.attn.q, now.attn.q, r);
    compare_input(batch, layer, "k", "[T, num_kv_heads, head_dim]", row(truth.attn.k.size()), truth.attn.k, now.attn.k, r);
    compare_input(batch, layer, "v", "[T, num_kv_heads, head_dim]", row(truth.attn.v.size()), truth.attn.v, now.attn.v, r);
  } else {
    compare_input(batch, layer, "x", "[T, conv_dim]", row(truth.gdn.x.size()), truth.gdn.x, now.gdn.x, r);
    compare_input(batch, layer, "conv_weight", "[conv_dim, d_conv]", 0, truth.gdn.conv_w, now.gdn.conv_w, r);
    compare_input(batch, layer, "g", "[T, num_v_heads]", row(truth.gdn.g.size()), truth.gdn.g, now.gdn.g, r);
    compare_input(batch, layer, "beta", "[T, num_v_heads]", row(truth.gdn.beta.size()), truth.gdn.beta, now.gdn.beta, r);
  }
  // The host copies are const in the ABI; a library that casts that away and
  // edits them changes what every later run and layer plans from.
  auto host_copy = [&](const char* name, const std::vector<int32_t>& want, const std::vector<int32_t>& found) {
    if (found.size() != want.size()) {
      r.fail(layer, -1, fmt::format("metadata host copy {} holds {} entries after the layer, {} were given", name,
                                    found.size(), want.size()));
      return;
    }
    for (size_t i = 0; i < want.size(); ++i)
      if (found[i] != want[i]) {
        r.fail(layer, -1, fmt::format("metadata host copy {} is read-only, and the layer changed it: entry {} was "
                                      "given as {}, found {}", name, i, want[i], found[i]));
        return;
      }
  };
  host_copy("cu_seqlens_host", staged.cu_seqlens_host, given.cu_seqlens_host);
  host_copy("kv_lens_host", staged.kv_lens_host, given.kv_lens_host);
  for (const GuardZones& z : guards) {
    compare_zone(z, false, layer, r);
    compare_zone(z, true, layer, r);
  }
}

namespace {
template <class T>
void compare_after_prepare(int layer, const char* entry, const std::string& name, const std::vector<T>& before,
                           const std::vector<T>& after, CheckResult& r) {
  size_t first = 0;
  const long long changed = count_bit_diff(before, after, &first);
  if (!changed) return;
  const std::string values = first < before.size() && first < after.size()
                                 ? fmt::format(" ({} -> {})", value_text(before[first]), value_text(after[first]))
                                 : "";
  r.fail(layer, -1,
         fmt::format("{} wrote {}: {} of {} elements changed, the first at element {}{}; prepare runs "
                     "outside timing and may write only its workspace, so work done there is not timed",
                     entry, name, changed, before.size(), first, values));
}
}  // namespace

void check_prepare_writes(int layer, const char* entry, const LayerOutputs& before, const LayerOutputs& after,
                          CheckResult& r) {
  compare_after_prepare(layer, entry, "out", before.out, after.out, r);
  compare_after_prepare(layer, entry, "k_cache", before.k_cache, after.k_cache, r);
  compare_after_prepare(layer, entry, "v_cache", before.v_cache, after.v_cache, r);
  compare_after_prepare(layer, entry, "conv_state", before.conv_state, after.conv_state, r);
  for (size_t b = 0; b < std::min(before.h_state.size(), after.h_state.size()); ++b)
    compare_after_prepare(layer, entry, fmt::format("h_state of stream {}", b), before.h_state[b], after.h_state[b], r);
}

}  // namespace pb
