// kernel_table.cu: our CUDA kernels behind the kernel ABI (pb-cuda): one context
// per run with its variants and faults, prepare() planning the work list, the
// gdn stream order and the RoPE frequency table into the workspace (untimed),
// and one entry per kernel launching on the harness's stream. The harness
// reaches these kernels only through this table (linked into prefill-bench;
// libpb_kernels_cuda.so exports it as pb_kernel_table_get).
// Invariants: no allocation, no device synchronisation in an entry; a non-zero
// schedule reverses the attention work list and the gdn stream order.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "kernels/attention_mma.h"
#include "kernels/attention_ws.h"
#include "kernels/gdn_bf16.h"
#include "kernels/gdn_chunked.h"
#include "kernels/gdn_split.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels.h"

namespace pb::kernels {
namespace {

constexpr int kRopeMaxHalf = 128;  // rope.cu's RopeConfig::kMaxHalf
// conv1d under auto: stage, device-checked 2026-12-03 (bit-identical to window on 17
// scenarios, 1.13-1.17x faster; window itself 1.4x row: kernels/PERF-NOTES.md "conv1d v4").
constexpr Conv1dImpl kConv1dDefault = Conv1dImpl::stage;

struct Ctx {
  bool causal_off_by_one = false, conv_state_bleed = false;
  bool graph_baked_kv_len = false;  // attention reads kv_lens the launch carries (kv_lens_host), not the device array
  std::string attention = "auto";  // auto (mma where the shape allows), fp32, mma, mma:N, ws, ws:cp
  std::string gdn = "auto";        // auto (bf16 at <= 8 v heads, else chunked, where the shape allows), chunked, split, bf16, token
  std::string conv1d = "auto";     // auto (stage where the shape allows), window, stage, row (the oracle)
  // The plan prepare() made, for the workspace it wrote.
  std::vector<AttnWorkItem> work;
  std::vector<int32_t> schedule;  // the persistent attention kernel's CTA lists (empty when it does not run)
  std::vector<float> inv_freq;
  std::vector<int32_t> order;
  std::vector<GdnChunkItem> chunk_items;  // the chunk list (split and chunked)
  std::vector<int32_t> chunk_first;
  bool walk_queue = false;  // the chunked walk's plan (kernels/gdn_walk_plan.h): it takes its work queue
  // The last plan made and what for (the chunk counts in launch order, then the shape): a
  // layer run again on the same batch reuses it (a batch of many items takes ms to plan).
  std::vector<int32_t> walk_plan_key;
  bool walk_plan_queue = false;
};

void put(char* buf, size_t len, const std::string& s) {
  if (buf && len) std::snprintf(buf, len, "%s", s.c_str());
}

pb_status from_cuda(cudaError_t e, const char* what, char* msg, size_t msg_len) {
  if (e == cudaSuccess) return PB_OK;
  put(msg, msg_len, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  return PB_ERR_DEVICE;
}

LayerShape attn_shape(const pb_attn_shape& s) {
  LayerShape l;
  l.num_q_heads = s.num_q_heads;
  l.num_kv_heads = s.num_kv_heads;
  l.head_dim = s.head_dim;
  l.rotary_dim = s.rotary_dim;
  l.rope_theta = s.rope_theta;
  l.mrope = s.mrope_enabled != 0;
  l.mrope_interleaved = s.mrope_interleaved != 0;
  for (int i = 0; i < 3; ++i) l.mrope_sections[i] = s.mrope_sections[i];
  l.block_size = s.block_size;
  l.num_blocks = s.num_blocks;
  l.poison_block = s.poison_block;
  return l;
}

LayerShape ssm_shape(const pb_ssm_shape& s) {
  LayerShape l;
  l.num_k_heads = s.num_k_heads;
  l.num_v_heads = s.num_v_heads;
  l.k_dim = s.k_dim;
  l.v_dim = s.v_dim;
  l.d_conv = s.d_conv;
  return l;
}

// Which attention kernel runs for this shape: -2 the fp32 kernel, else the
// tensor-core kernel's variant (-1: its default for the head dim).
int attention_variant(const Ctx& c, const LayerShape& shape) {
  if (c.attention == "fp32") return -2;
  int variant = -1;
  if (c.attention.rfind("mma:", 0) == 0) variant = std::atoi(c.attention.c_str() + 4);
  return attention_mma_supported(shape) ? variant : -2;
}
// The split runs only when asked for (`--impl gdn=split`). No auto rule: the split wins
// only where the batch has few streams (one stream of 32768 tokens: 1.04-2.15x the
// chunked walk over six head layouts; eight of 4096: 0.54-0.60x; 32 of 1024: 0.39-0.40x;
// kernels/PERF-NOTES.md "Session 34", H100), so a rule that helps must look at the batch,
// and one that looks at the batch picks another kernel for a stream run alone than
// co-batched, which the invariance check rightly fails (their sums differ in order).
bool gdn_split(const Ctx& c, const LayerShape& shape) { return c.gdn == "split" && gdn_split_supports(shape); }
// The bf16 split (gdn_bf16.cu, fla's arithmetic, declared bf16-chunk64) when asked for
// (`--impl gdn=bf16`), and under auto at kGdnBf16AutoMaxVHeads v heads or fewer: there the
// chunked walk has too few (stream, v head) chains to fill the SMs on a long stream, and the
// split is 1.57-2.35x it on 2 x 4096, the mixed batch 7..8192 and 1 x 65536, while it loses
// 0.67-0.78x on 32 x 512, 0.85-0.98x on 8 x 2048 and about 0.5-0.7x on the small shipped
// batches (decode-heavy 0.50x: 76 against 39 us, before session 49's short-chunk trim) (2 / 8
// and 4 / 8 heads, d64 and d128; kernels/PERF-NOTES.md "Session 48", H100). At 16 v heads it
// loses on 8 x 2048 (0.90-0.93x), at 32 and 64 on every batch measured (0.67-0.70x). A rule by shape alone: one by the batch's
// lengths would run a stream alone in another kernel than co-batched, which the invariance
// check rightly fails. It trades the tf32 kernels' precision for bf16 operands.
constexpr int kGdnBf16AutoMaxVHeads = 8;
bool gdn_bf16(const Ctx& c, const LayerShape& shape) {
  const bool want = c.gdn == "bf16" || (c.gdn == "auto" && shape.num_v_heads <= kGdnBf16AutoMaxVHeads);
  return want && gdn_bf16_supports(shape);
}
// The warp-specialized kernel (attention_ws.cu) when asked for or under auto, where
// the shape and device allow it; its q-tiles are its own (attention_tile_rows).
// auto takes it at every head dim and head layout (kernels/PERF-NOTES.md "v8", H200):
// 1.1-1.8x the wgmma kernel on long and mixed batches, GQA included; 32 x 512 GQA
// 16/2 is the one measured shape it loses (6% at d128, 5% at d64 before v8.2). A rule
// by shape alone: one by the batch's lengths would run a stream alone in another
// kernel than co-batched, which the invariance check rightly fails.
bool attention_ws(const Ctx& c, const LayerShape& shape) {
  const bool want = c.attention.rfind("ws", 0) == 0 || c.attention == "auto";
  return want && attention_ws_supported(shape);
}
bool gdn_chunked(const Ctx& c, const LayerShape& shape) {
  const bool want = c.gdn == "chunked" || c.gdn == "auto";
  return want && gdn_chunked_supports(shape);
}
// The one gdn kernel that runs this shape under c's option: the variant asked for where it
// takes the shape, else the token kernel (the oracle, every shape).
enum class GdnImpl { token, chunked, split, bf16 };
GdnImpl gdn_impl(const Ctx& c, const LayerShape& shape) {
  if (gdn_bf16(c, shape)) return GdnImpl::bf16;
  if (gdn_split(c, shape)) return GdnImpl::split;
  if (gdn_chunked(c, shape)) return GdnImpl::chunked;
  return GdnImpl::token;
}

Conv1dImpl conv1d_impl(const Ctx& c) {
  if (c.conv1d == "auto") return kConv1dDefault;
  return c.conv1d == "stage" ? Conv1dImpl::stage : c.conv1d == "window" ? Conv1dImpl::window : Conv1dImpl::row;
}

std::vector<int32_t> host_vec(const int32_t* p, uint32_t n) { return p ? std::vector<int32_t>(p, p + n) : std::vector<int32_t>(); }

uint64_t round256(uint64_t n) { return (n + 255) & ~uint64_t(255); }

// Workspace layouts (offsets from workspace.data).
// schedule: the persistent attention kernel's CTA lists (attention_ws.h), when it runs.
struct AttnLayout {
  uint64_t q_rot = 0, k_rot = 0, inv_freq = 0, work = 0, schedule = 0, baked = 0, bytes = 0;  // baked: the fault's kv_lens
};
AttnLayout attn_layout(const pb_attn_shape& s, uint32_t T, size_t work_items, size_t schedule_ints) {
  AttnLayout l;
  l.q_rot = 0;
  l.k_rot = round256(uint64_t(T) * s.num_q_heads * s.head_dim * 2);
  l.inv_freq = l.k_rot + round256(uint64_t(T) * s.num_kv_heads * s.head_dim * 2);
  l.work = l.inv_freq + round256(uint64_t(s.rotary_dim / 2 + 1) * 4);
  l.schedule = l.work + round256((work_items + 1) * sizeof(AttnWorkItem));
  l.baked = l.schedule + round256(uint64_t(schedule_ints) * 4);
  l.bytes = l.baked + round256(uint64_t(BakedI32::kMax) * 4);
  return l;
}
struct SsmLayout {
  // gdn: the split's or the chunked kernel's region (each starts with the chunk
  // list, gdn_chunk_list.h), 0 when the token kernel runs
  uint64_t conv_out = 0, order = 0, gdn = 0, bytes = 0;
};
SsmLayout ssm_layout(const Ctx& c, const pb_ssm_shape& s, uint32_t T, uint32_t N) {
  SsmLayout l;
  l.order = round256(uint64_t(T) * s.conv_dim * 2);
  l.bytes = l.order + round256(uint64_t(N + 1) * 4);
  const LayerShape shape = ssm_shape(s);
  const GdnImpl impl = gdn_impl(c, shape);
  const uint64_t own = impl == GdnImpl::bf16      ? gdn_bf16_layout(shape, T, N).bytes
                       : impl == GdnImpl::split   ? gdn_split_layout(shape, T, N).bytes
                       : impl == GdnImpl::chunked ? gdn_chunked_layout(shape, T, N).bytes
                                                  : 0;
  if (own) {
    l.gdn = l.bytes;
    l.bytes += own;
  }
  return l;
}

// Tokens per q-tile of the attention kernel that runs this shape: the work list's
// tiles and the grid bound below both follow it.
int attention_tile_rows(const Ctx& c, const LayerShape& shape) {
  if (attention_ws(c, shape)) return attention_ws_rows_per_tile(shape);
  return attention_variant(c, shape) != -2 ? attention_mma_rows_per_tile(shape) : attention_rows_per_tile(shape);
}

// The bucket's bound on the attention work list: for any split of total_tokens
// over batch_size streams, sum ceil(count_b / rows) <= (T + N * (rows - 1)) / rows.
// The grid and the workspace are sized from it, never from this batch's list, so
// a captured launch stays valid for every batch of the bucket (PB_CAP_GRAPH); the
// list prepare() writes is padded with {-1, -1} items, which the kernels skip.
size_t max_work_items(const Ctx& c, const LayerShape& shape, const pb_batched_attn_metadata& m) {
  const uint64_t rows = static_cast<uint64_t>(attention_tile_rows(c, shape));
  if (rows == 0) return 0;
  return static_cast<size_t>((uint64_t(m.total_tokens) + uint64_t(m.batch_size) * (rows - 1)) / rows);
}

// The layer's workspace layout for this batch's bucket: the work list's bound, and the
// schedule's (at most one offset and one entry per entry, plus one) where ws runs.
AttnLayout attn_layout(const Ctx& c, const pb_attn_shape& s, const pb_batched_attn_metadata& m) {
  const LayerShape shape = attn_shape(s);
  const size_t bound = max_work_items(c, shape, m);
  const size_t schedule = attention_ws(c, shape) ? 2 * bound * size_t(attention_ws_entries_per_item(shape)) + 1 : 0;
  return attn_layout(s, m.total_tokens, bound, schedule);
}

template <class T>
T* ws(uint64_t base, uint64_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

// ---- the table's functions ----------------------------------------------

pb_status init(void** ctx, char* msg, size_t msg_len) {
  try {
    *ctx = new Ctx();
    return PB_OK;
  } catch (const std::exception& e) {
    put(msg, msg_len, e.what());
    return PB_ERR_INTERNAL;
  }
}
pb_status teardown(void* ctx, char*, size_t) {
  delete static_cast<Ctx*>(ctx);
  return PB_OK;
}

pb_status supports(void*, const pb_layer_shape* s, char* why, size_t why_len) {
  if (s->kind == PB_LAYER_ATTN) {
    const pb_attn_shape& a = s->attn;
    if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) {
      put(why, why_len, "pb-cuda attention takes head_dim 64, 128 or 256, not " + std::to_string(a.head_dim));
      return PB_ERR_UNSUPPORTED;
    }
    if (a.rotary_dim / 2 > kRopeMaxHalf) {
      put(why, why_len, "pb-cuda rope takes rotary_dim <= " + std::to_string(2 * kRopeMaxHalf));
      return PB_ERR_UNSUPPORTED;
    }
    return PB_OK;
  }
  if (s->kind == PB_LAYER_SSM) {
    const pb_ssm_shape& g = s->ssm;
    if (g.d_conv < 2 || g.d_conv > 16) {
      put(why, why_len, "pb-cuda conv1d takes d_conv 2..16, not " + std::to_string(g.d_conv));
      return PB_ERR_UNSUPPORTED;
    }
    if (g.k_dim % 4 != 0 || g.k_dim > 256) {
      put(why, why_len, "pb-cuda gdn takes k_dim a multiple of 4 up to 256, not " + std::to_string(g.k_dim));
      return PB_ERR_UNSUPPORTED;
    }
    return PB_OK;
  }
  put(why, why_len, "unknown layer kind");
  return PB_ERR_UNSUPPORTED;
}

pb_status set_option(void* ctx, const char* key, const char* value, char* msg, size_t msg_len) {
  Ctx& c = *static_cast<Ctx*>(ctx);
  const std::string k = key ? key : "", v = value ? value : "";
  if (k == "fault") {
    if (v == "causal-off-by-one") c.causal_off_by_one = true;
    else if (v == "conv-state-bleed") c.conv_state_bleed = true;
    else if (v == "graph-baked-kv-len") c.graph_baked_kv_len = true;
    else {
      put(msg, msg_len, "pb-cuda has no fault '" + v + "' (it has causal-off-by-one, conv-state-bleed, graph-baked-kv-len)");
      return PB_ERR_UNSUPPORTED;
    }
    return PB_OK;
  }
  if (k == "attention") {
    bool ok = v == "auto" || v == "fp32" || v == "mma" || v == "ws" || v == "ws:cp";
    if (v.rfind("mma:", 0) == 0 && v.size() > 4 && v.size() <= 6) {
      ok = v.find_first_not_of("0123456789", 4) == std::string::npos;
    }
    if (!ok) {
      put(msg, msg_len, "pb-cuda attention variants: auto, fp32, mma, mma:N, ws, ws:cp (not '" + v + "')");
      return PB_ERR_UNSUPPORTED;
    }
    if (v.rfind("ws", 0) == 0 && !wgmma_available()) {
      put(msg, msg_len, "pb-cuda attention=" + v + " needs a compute capability 9.0 device (sm_90a: wgmma, TMA)");
      return PB_ERR_UNSUPPORTED;
    }
    c.attention = v;
    return PB_OK;
  }
  if (k == "gdn") {
    if (v != "auto" && v != "chunked" && v != "split" && v != "bf16" && v != "token") {
      put(msg, msg_len, "pb-cuda gdn variants: auto, chunked, split, bf16, token (not '" + v + "')");
      return PB_ERR_UNSUPPORTED;
    }
    c.gdn = v;
    return PB_OK;
  }
  if (k == "conv1d") {
    if (v != "auto" && v != "window" && v != "row" && v != "stage") {
      put(msg, msg_len, "pb-cuda conv1d variants: auto, window, row, stage (not '" + v + "')");
      return PB_ERR_UNSUPPORTED;
    }
    c.conv1d = v;
    return PB_OK;
  }
  put(msg, msg_len, "pb-cuda has no option '" + k + "' (it has attention, gdn, conv1d, fault)");
  return PB_ERR_UNSUPPORTED;
}

pb_status describe(void* ctx, char* buf, size_t buf_len) {
  const Ctx& c = *static_cast<Ctx*>(ctx);
  std::string d = "attention=" + std::string(c.attention == "auto" ? "ws on sm_90, else mma/fp32 by head_dim"
                                             : c.attention == "ws" ? "ws(warp-specialized, TMA producer where block_size is a multiple of 8 that divides or is divided by the key tile (128; 64 at d256), cp.async producer otherwise)"
                                             : c.attention == "ws:cp" ? "ws:cp(warp-specialized, cp.async producer)"
                                                                      : c.attention) +
                  " gdn=" + std::string(c.gdn == "auto"    ? "bf16 at <=8 v heads, else chunked-tf32; token where neither takes the shape"
                                   : c.gdn == "split" ? (wgmma_available() ? "split(scan: wgmma, bulk-copy ring)/token by shape"
                                                                           : "split(scan: mma.sync)/token by shape")
                                   : c.gdn == "bf16"  ? "bf16(split, 64-token chunks, bf16 mma.sync)/token by shape"
                                                      : c.gdn);
  const Conv1dImpl ci = conv1d_impl(c);
  d += " conv1d=" + std::string(ci == Conv1dImpl::window  ? "window(d_conv<=4)/row"
                                : ci == Conv1dImpl::stage ? "stage(d_conv<=4)/row"
                                                          : "row");
  if (c.causal_off_by_one) d += " fault=causal-off-by-one";
  if (c.conv_state_bleed) d += " fault=conv-state-bleed";
  if (c.graph_baked_kv_len) d += " fault=graph-baked-kv-len";
  put(buf, buf_len, d);
  return PB_OK;
}

// The gdn kernel's arithmetic at this shape: the bf16 split's bf16 products, the split or
// the chunked kernel's tf32 products, or the token kernel's fp32 (the reference's lp
// follows it: docs/TOLERANCES.md).
pb_status precision(void* ctx, const pb_layer_shape* s, const char* kernel, char* buf, size_t buf_len) {
  const Ctx& c = *static_cast<Ctx*>(ctx);
  const bool gdn = s->kind == PB_LAYER_SSM && kernel && std::string(kernel) == "gdn";
  const GdnImpl impl = gdn ? gdn_impl(c, ssm_shape(s->ssm)) : GdnImpl::token;
  put(buf, buf_len, impl == GdnImpl::bf16      ? "bf16-chunk64"
                    : impl == GdnImpl::split   ? "tf32-split"
                    : impl == GdnImpl::chunked ? "tf32-chunked"
                                               : "fp32");
  return PB_OK;
}

pb_status workspace_bytes(void* ctx, const pb_layer_shape* s, const pb_batched_attn_metadata* m, uint64_t* bytes,
                          char* msg, size_t msg_len) {
  try {
    const Ctx& c = *static_cast<Ctx*>(ctx);
    if (s->kind == PB_LAYER_ATTN)
      *bytes = attn_layout(c, s->attn, *m).bytes;
    else
      *bytes = ssm_layout(c, s->ssm, m->total_tokens, m->batch_size).bytes;
    return PB_OK;
  } catch (const std::exception& e) {
    put(msg, msg_len, e.what());
    return PB_ERR_INTERNAL;
  }
}

pb_status prepare_attn(void* ctx, const pb_attn_layer_args* a, void* stream, char* msg, size_t msg_len) {
  Ctx& c = *static_cast<Ctx*>(ctx);
  const LayerShape shape = attn_shape(a->shape);
  const pb_batched_attn_metadata& m = a->metadata;
  const std::vector<int32_t> cu = host_vec(m.cu_seqlens_host, m.cu_seqlens_host_count);
  const std::vector<int32_t> kv = host_vec(m.kv_lens_host, m.kv_lens_host_count);
  c.work = plan_attention_tiles(shape, attention_tile_rows(c, shape), cu, kv);
  if (a->schedule) std::reverse(c.work.begin(), c.work.end());  // shortest first: another order of the same work
  const size_t bound = max_work_items(c, shape, m);
  if (c.work.size() > bound) {
    put(msg, msg_len, "the host copies give " + std::to_string(c.work.size()) + " attention work items, more than the " +
                          std::to_string(bound) + " any split of total_tokens over batch_size can (cu_seqlens_host inconsistent)");
    return PB_ERR_INVALID;
  }
  c.work.resize(bound, AttnWorkItem{-1, -1});  // padding the kernels skip: the grid is the bucket's
  c.inv_freq = rope_inv_freq(shape);
  const AttnLayout l = attn_layout(c, a->shape, m);
  if (a->workspace.bytes < l.bytes) {
    put(msg, msg_len, "workspace smaller than workspace_bytes asked for");
    return PB_ERR_INVALID;
  }
  c.schedule = attention_ws(c, shape) ? plan_attention_ws_schedule(shape, c.work, cu, kv) : std::vector<int32_t>();
  auto st = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaSuccess;
  if (!c.inv_freq.empty())
    e = cudaMemcpyAsync(ws<float>(a->workspace.data, l.inv_freq), c.inv_freq.data(), c.inv_freq.size() * 4,
                        cudaMemcpyHostToDevice, st);
  if (e == cudaSuccess && !c.work.empty())
    e = cudaMemcpyAsync(ws<AttnWorkItem>(a->workspace.data, l.work), c.work.data(), c.work.size() * sizeof(AttnWorkItem),
                        cudaMemcpyHostToDevice, st);
  if (e == cudaSuccess && !c.schedule.empty())
    e = cudaMemcpyAsync(ws<int32_t>(a->workspace.data, l.schedule), c.schedule.data(), c.schedule.size() * 4,
                        cudaMemcpyHostToDevice, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);  // the host vectors may change before the next prepare
  return from_cuda(e, "prepare_attn upload", msg, msg_len);
}

pb_status rope(void* ctx, const pb_attn_layer_args* a, void* stream, char* msg, size_t msg_len) {
  const Ctx& c = *static_cast<Ctx*>(ctx);
  const AttnLayout l = attn_layout(c, a->shape, a->metadata);
  const uint64_t w = a->workspace.data;
  const pb_batched_attn_metadata& m = a->metadata;
  return from_cuda(launch_rope(static_cast<cudaStream_t>(stream), attn_shape(a->shape), m.total_tokens,
                               m.positions_stacked, m.positions_h_stacked, m.positions_w_stacked,
                               ws<const float>(w, l.inv_freq), reinterpret_cast<const bf16*>(a->q.data),
                               reinterpret_cast<const bf16*>(a->k.data), ws<bf16>(w, l.q_rot), ws<bf16>(w, l.k_rot)),
                   "rope", msg, msg_len);
}

pb_status kv_write(void* ctx, const pb_attn_layer_args* a, void* stream, char* msg, size_t msg_len) {
  const Ctx& c = *static_cast<Ctx*>(ctx);
  const AttnLayout l = attn_layout(c, a->shape, a->metadata);
  return from_cuda(launch_kv_write(static_cast<cudaStream_t>(stream), attn_shape(a->shape), a->metadata.total_tokens,
                                   a->metadata.slot_stacked, ws<const bf16>(a->workspace.data, l.k_rot),
                                   reinterpret_cast<const bf16*>(a->v.data), reinterpret_cast<bf16*>(a->k_cache.data),
                                   reinterpret_cast<bf16*>(a->v_cache.data)),
                   "kv_write", msg, msg_len);
}

pb_status attention(void* ctx, const pb_attn_layer_args* a, void* stream, char* msg, size_t msg_len) {
  const Ctx& c = *static_cast<Ctx*>(ctx);
  const LayerShape shape = attn_shape(a->shape);
  const AttnLayout l = attn_layout(c, a->shape, a->metadata);
  const uint64_t w = a->workspace.data;
  const pb_batched_attn_metadata& m = a->metadata;
  const int variant = attention_variant(c, shape);
  AttnArgs args;
  args.shape = shape;
  args.batch_size = m.batch_size;
  args.total_tokens = m.total_tokens;
  args.max_blocks_per_seq = m.max_blocks_per_seq;
  args.cu_seqlens = m.cu_seqlens;
  args.kv_lens = m.kv_lens;
  args.block_table_ptrs = m.block_table_ptrs;
  args.work = ws<const AttnWorkItem>(w, l.work);
  args.schedule = ws<const int32_t>(w, l.schedule);
  args.num_work = static_cast<int>(max_work_items(c, shape, m));  // the bucket's grid, not this batch's list
  args.q_rot = ws<const bf16>(w, l.q_rot);
  args.k_cache = reinterpret_cast<const bf16*>(a->k_cache.data);
  args.v_cache = reinterpret_cast<const bf16*>(a->v_cache.data);
  args.out = reinterpret_cast<bf16*>(a->out.data);
  args.scale = a->shape.scale;
  args.causal_off_by_one = c.causal_off_by_one;
  args.variant = variant;
  const auto st = static_cast<cudaStream_t>(stream);
  if (c.graph_baked_kv_len) {
    // The fault: each stream's kv_len rides in a launch's parameters (from the host
    // copy), as a kernel that takes seqlen_k by value would; a graph replays them.
    if (!m.kv_lens_host || m.kv_lens_host_count != m.batch_size || m.batch_size > uint32_t(BakedI32::kMax)) {
      put(msg, msg_len, "fault graph-baked-kv-len: needs kv_lens_host for at most " + std::to_string(BakedI32::kMax) + " streams");
      return PB_ERR_UNSUPPORTED;
    }
    int32_t* baked = ws<int32_t>(w, l.baked);
    const cudaError_t e = launch_write_baked_i32(st, baked, m.kv_lens_host, static_cast<int>(m.batch_size));
    if (e != cudaSuccess) return from_cuda(e, "attention (baked kv_lens)", msg, msg_len);
    args.kv_lens = reinterpret_cast<uint64_t>(baked);
  }
  if (attention_ws(c, shape))
    return from_cuda(launch_attention_ws(st, args, c.attention != "ws:cp"), "attention (warp-specialized)", msg, msg_len);
  const cudaError_t e = variant != -2 ? launch_attention_mma(st, args) : launch_attention(st, args);
  return from_cuda(e, variant != -2 ? "attention (tensor cores)" : "attention (fp32)", msg, msg_len);
}

pb_status prepare_ssm(void* ctx, const pb_ssm_layer_args* a, void* stream, char* msg, size_t msg_len) {
  Ctx& c = *static_cast<Ctx*>(ctx);
  const pb_batched_attn_metadata& m = a->metadata;
  c.order = plan_gdn_order(host_vec(m.cu_seqlens_host, m.cu_seqlens_host_count));
  if (c.order.size() != m.batch_size) {  // host copy inconsistent with batch_size: identity
    c.order.resize(m.batch_size);
    for (uint32_t b = 0; b < m.batch_size; ++b) c.order[b] = static_cast<int32_t>(b);
  }
  if (a->schedule) std::reverse(c.order.begin(), c.order.end());
  c.walk_queue = false;
  const SsmLayout l = ssm_layout(c, a->shape, m.total_tokens, m.batch_size);
  if (a->workspace.bytes < l.bytes) {
    put(msg, msg_len, "workspace smaller than workspace_bytes asked for");
    return PB_ERR_INVALID;
  }
  const auto st = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaSuccess;
  if (!c.order.empty())
    e = cudaMemcpyAsync(ws<int32_t>(a->workspace.data, l.order), c.order.data(), c.order.size() * 4,
                        cudaMemcpyHostToDevice, st);
  if (e == cudaSuccess && l.gdn) {  // the chunk list of the split, bf16 or chunked kernel (kernels/gdn_chunk_list.h)
    const LayerShape shape = ssm_shape(a->shape);
    const GdnImpl impl = gdn_impl(c, shape);
    const int chunk = impl == GdnImpl::bf16 ? kGdnBf16Chunk : kGdnChunk;
    plan_gdn_chunks(host_vec(m.cu_seqlens_host, m.cu_seqlens_host_count), c.order, &c.chunk_items, &c.chunk_first, chunk);
    const GdnChunkList cl = gdn_chunk_list_layout(m.total_tokens, m.batch_size, chunk);
    if (c.chunk_items.size() > cl.max_chunks || c.chunk_first.size() != m.batch_size + 1u) {
      put(msg, msg_len, "prepare_ssm: the host cu_seqlens give more chunks than total_tokens and batch_size allow");
      return PB_ERR_INVALID;
    }
    const int32_t count = static_cast<int32_t>(c.chunk_items.size());
    const uint64_t base = a->workspace.data + l.gdn;
    e = cudaMemcpyAsync(ws<int32_t>(base, cl.count), &count, 4, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess && count)
      e = cudaMemcpyAsync(ws<GdnChunkItem>(base, cl.items), c.chunk_items.data(), c.chunk_items.size() * sizeof(GdnChunkItem),
                          cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(ws<int32_t>(base, cl.chunk_first), c.chunk_first.data(), c.chunk_first.size() * 4,
                          cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess && impl == GdnImpl::chunked) {
      std::vector<int32_t> chunks(c.order.size());  // in launch order
      for (size_t i = 0; i < c.order.size(); ++i) chunks[i] = c.chunk_first[c.order[i] + 1] - c.chunk_first[c.order[i]];
      std::vector<int32_t> key = chunks;
      key.insert(key.end(), {static_cast<int32_t>(m.batch_size), shape.num_k_heads, shape.num_v_heads, shape.k_dim, shape.v_dim});
      if (key != c.walk_plan_key) {
        c.walk_plan_queue = plan_gdn_chunked_walk(shape, m.batch_size, chunks);
        c.walk_plan_key = std::move(key);
      }
      c.walk_queue = c.walk_plan_queue;
    }
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  return from_cuda(e, "prepare_ssm upload", msg, msg_len);
}

pb_status conv1d(void* ctx, const pb_ssm_layer_args* a, void* stream, char* msg, size_t msg_len) {
  const Ctx& c = *static_cast<Ctx*>(ctx);
  const pb_batched_attn_metadata& m = a->metadata;
  const SsmLayout l = ssm_layout(c, a->shape, m.total_tokens, m.batch_size);
  return from_cuda(launch_conv1d(static_cast<cudaStream_t>(stream), ssm_shape(a->shape), m.batch_size, m.total_tokens,
                                 m.cu_seqlens, reinterpret_cast<const bf16*>(a->x.data),
                                 reinterpret_cast<const bf16*>(a->conv_weight.data),
                                 reinterpret_cast<bf16*>(a->conv_state.data), ws<bf16>(a->workspace.data, l.conv_out),
                                 c.conv_state_bleed, conv1d_impl(c)),
                   "conv1d", msg, msg_len);
}

pb_status gdn(void* ctx, const pb_ssm_layer_args* a, void* stream, char* msg, size_t msg_len) {
  const Ctx& c = *static_cast<Ctx*>(ctx);
  const pb_batched_attn_metadata& m = a->metadata;
  const LayerShape shape = ssm_shape(a->shape);
  const SsmLayout l = ssm_layout(c, a->shape, m.total_tokens, m.batch_size);
  const uint64_t w = a->workspace.data;
  const GdnImpl impl = gdn_impl(c, shape);
  GdnArgs args;
  args.shape = shape;
  args.batch_size = m.batch_size;
  args.total_tokens = m.total_tokens;
  args.cu_seqlens = m.cu_seqlens;
  args.h_state_ptrs = a->h_state_ptrs;
  args.stream_order = ws<const int32_t>(w, l.order);
  args.conv_out = ws<const bf16>(w, l.conv_out);
  args.g = reinterpret_cast<const float*>(a->g.data);
  args.beta = reinterpret_cast<const float*>(a->beta.data);
  args.out = reinterpret_cast<bf16*>(a->out.data);
  const auto st = static_cast<cudaStream_t>(stream);
  switch (impl) {
    case GdnImpl::bf16: return from_cuda(launch_gdn_bf16(st, args, w + l.gdn), "gdn (bf16 split)", msg, msg_len);
    case GdnImpl::split: return from_cuda(launch_gdn_split(st, args, w + l.gdn), "gdn (split)", msg, msg_len);
    case GdnImpl::chunked:
      return from_cuda(launch_gdn_chunked(st, args, w + l.gdn, c.walk_queue), "gdn (chunked)", msg, msg_len);
    case GdnImpl::token: break;
  }
  return from_cuda(launch_gdn(st, args), "gdn (token)", msg, msg_len);
}

pb_status attn_layer(void* ctx, const pb_attn_layer_args* a, void* stream, char* msg, size_t msg_len) {
  for (auto fn : {rope, kv_write, attention})
    if (const pb_status st = fn(ctx, a, stream, msg, msg_len); st != PB_OK) return st;
  return PB_OK;
}
pb_status ssm_layer(void* ctx, const pb_ssm_layer_args* a, void* stream, char* msg, size_t msg_len) {
  for (auto fn : {conv1d, gdn})
    if (const pb_status st = fn(ctx, a, stream, msg, msg_len); st != PB_OK) return st;
  return PB_OK;
}

pb_kernel_table make_table() {
  pb_kernel_table t;
  std::memset(&t, 0, sizeof t);
  t.abi_version = PB_KERNEL_ABI_VERSION;
  t.struct_size = sizeof(pb_kernel_table);
  t.name = "pb-cuda";
  t.version = "1.0.0";
  t.device = PB_DEVICE_CUDA;
  // Graph-safe: the entries launch grids from total_tokens, batch_size and the
  // shape only (the attention grid from max_work_items), read every per-batch
  // value from the metadata's arrays or the workspace prepare() wrote, and never
  // copy or synchronise (docs/KERNEL-ABI.md "Graph capture"; on a GPU,
  // scripts/device-check.sh runs every scenario with --graph).
  t.capabilities = PB_CAP_SCHEDULE | PB_CAP_GRAPH;
  t.init = init;
  t.teardown = teardown;
  t.supports = supports;
  t.set_option = set_option;
  t.describe = describe;
  t.workspace_bytes = workspace_bytes;
  t.prepare_attn = prepare_attn;
  t.prepare_ssm = prepare_ssm;
  t.attn_layer = attn_layer;
  t.ssm_layer = ssm_layer;
  t.rope = rope;
  t.kv_write = kv_write;
  t.attention = attention;
  t.conv1d = conv1d;
  t.gdn = gdn;
  t.precision = precision;
  return t;
}

}  // namespace
}  // namespace pb::kernels

namespace pb {
const pb_kernel_table* cuda_kernel_table() {
  static const pb_kernel_table table = kernels::make_table();
  return &table;
}
}  // namespace pb
