// host_kernel_table.cpp: the host kernel library's pb_kernel_table: one context
// per run holding its options (variants and our kernel-internal faults), every
// entry wrapped so that no exception crosses the C ABI.
// Invariants: supports() accepts every shape the host kernels compute; the
// layer entries are exactly the per-kernel entries in order.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "host_kernels.h"

namespace pb::host_kernels {
namespace {

void put(char* buf, size_t len, const std::string& text) {
  if (!buf || !len) return;
  std::snprintf(buf, len, "%s", text.c_str());
}

template <class Fn>
pb_status guarded(char* msg, size_t msg_len, Fn&& fn) {
  try {
    fn();
    return PB_OK;
  } catch (const KernelError& e) {
    put(msg, msg_len, e.message);
    return e.status;
  } catch (const std::exception& e) {
    put(msg, msg_len, std::string("pb-host: ") + e.what());
    return PB_ERR_INTERNAL;
  } catch (...) {
    put(msg, msg_len, "pb-host: unknown exception");
    return PB_ERR_INTERNAL;
  }
}

Options& opts(void* ctx) { return *static_cast<Options*>(ctx); }

pb_status init(void** ctx, char* msg, size_t msg_len) {
  return guarded(msg, msg_len, [&] { *ctx = new Options(); });
}
pb_status teardown(void* ctx, char*, size_t) {
  delete static_cast<Options*>(ctx);
  return PB_OK;
}

pb_status supports(void*, const pb_layer_shape* shape, char* why, size_t why_len) {
  if (!shape || (shape->kind != PB_LAYER_ATTN && shape->kind != PB_LAYER_SSM)) {
    put(why, why_len, "unknown layer kind");
    return PB_ERR_UNSUPPORTED;
  }
  if (shape->kind == PB_LAYER_SSM && shape->ssm.d_conv < 1) {
    put(why, why_len, "d_conv < 1");
    return PB_ERR_UNSUPPORTED;
  }
  return PB_OK;
}

pb_status set_option(void* ctx, const char* key, const char* value, char* msg, size_t msg_len) {
  const std::string k = key ? key : "", v = value ? value : "";
  Options& o = opts(ctx);
  if (k == "fault") {
    if (v == "causal-off-by-one") o.causal_off_by_one = true;
    else if (v == "conv-state-bleed") o.conv_state_bleed = true;
    else if (v == "gdn-state-race") o.gdn_state_race = true;
    else if (v == "grid-short-by-one") o.grid_short_by_one = true;
    else if (v == "graph-baked-kv-len") o.graph_baked_kv_len = true;
    else if (v == "batch-dependent-split") o.batch_dependent_split = true;
    else if (v == "out-row-past-end") o.out_row_past_end = true;
    else if (v == "inputs-in-place") o.inputs_in_place = true;
    else {
      put(msg, msg_len, "pb-host has no fault '" + v + "' (it has causal-off-by-one, conv-state-bleed, gdn-state-race, grid-short-by-one, graph-baked-kv-len, batch-dependent-split, out-row-past-end, inputs-in-place)");
      return PB_ERR_UNSUPPORTED;
    }
    return PB_OK;
  }
  if (k == "attention" || k == "gdn") {
    const char* only = k == "attention" ? "tiled" : "recurrent";
    if (v == only) return PB_OK;
    put(msg, msg_len, "pb-host has one " + k + " variant, '" + only + "' (not '" + v + "')");
    return PB_ERR_UNSUPPORTED;
  }
  put(msg, msg_len, "pb-host has no option '" + k + "' (it has attention, gdn, fault)");
  return PB_ERR_UNSUPPORTED;
}

pb_status describe(void* ctx, char* buf, size_t buf_len) {
  const Options& o = opts(ctx);
  std::string d = "attention=tiled gdn=recurrent";
  if (o.causal_off_by_one) d += " fault=causal-off-by-one";
  if (o.conv_state_bleed) d += " fault=conv-state-bleed";
  if (o.gdn_state_race) d += " fault=gdn-state-race";
  if (o.grid_short_by_one) d += " fault=grid-short-by-one";
  if (o.graph_baked_kv_len) d += " fault=graph-baked-kv-len";
  if (o.batch_dependent_split) d += " fault=batch-dependent-split";
  if (o.out_row_past_end) d += " fault=out-row-past-end";
  if (o.inputs_in_place) d += " fault=inputs-in-place";
  put(buf, buf_len, d);
  return PB_OK;
}

pb_status workspace_bytes(void*, const pb_layer_shape* shape, const pb_batched_attn_metadata* m,
                          uint64_t* bytes, char* msg, size_t msg_len) {
  return guarded(msg, msg_len, [&] {
    if (!shape || !m || !bytes) throw KernelError{PB_ERR_INVALID, "null argument"};
    *bytes = shape->kind == PB_LAYER_ATTN ? attn_workspace_bytes(shape->attn, m->total_tokens)
                                          : ssm_workspace_bytes(shape->ssm, m->total_tokens);
  });
}

template <void (*K)(const Options&, const pb_attn_layer_args&)>
pb_status attn_entry(void* ctx, const pb_attn_layer_args* a, void*, char* msg, size_t msg_len) {
  return guarded(msg, msg_len, [&] {
    if (!a || a->struct_size < sizeof(pb_attn_layer_args)) throw KernelError{PB_ERR_INVALID, "attn args: struct_size too small"};
    K(opts(ctx), *a);
  });
}
template <void (*K)(const Options&, const pb_ssm_layer_args&)>
pb_status ssm_entry(void* ctx, const pb_ssm_layer_args* a, void*, char* msg, size_t msg_len) {
  return guarded(msg, msg_len, [&] {
    if (!a || a->struct_size < sizeof(pb_ssm_layer_args)) throw KernelError{PB_ERR_INVALID, "ssm args: struct_size too small"};
    K(opts(ctx), *a);
  });
}

void attn_layer_all(const Options& o, const pb_attn_layer_args& a) {
  rope(o, a);
  kv_write(o, a);
  attention(o, a);
}
void ssm_layer_all(const Options& o, const pb_ssm_layer_args& a) {
  conv1d(o, a);
  gdn(o, a);
}

pb_kernel_table make_table() {
  pb_kernel_table t;
  std::memset(&t, 0, sizeof t);
  t.abi_version = PB_KERNEL_ABI_VERSION;
  t.struct_size = sizeof(pb_kernel_table);
  t.name = "pb-host";
  t.version = "1.0.0";
  t.device = PB_DEVICE_HOST;
  // Graph-safe: every layer entry reads the per-batch values (cu_seqlens, kv_lens,
  // tables, slots, positions) from the metadata's arrays, never the host copies,
  // and max_blocks_per_seq only as a capacity; the workspace depends on total_tokens only.
  t.capabilities = PB_CAP_SCHEDULE | PB_CAP_GRAPH;
  t.init = init;
  t.teardown = teardown;
  t.supports = supports;
  t.set_option = set_option;
  t.describe = describe;
  t.workspace_bytes = workspace_bytes;
  t.attn_layer = attn_entry<attn_layer_all>;
  t.ssm_layer = ssm_entry<ssm_layer_all>;
  t.rope = attn_entry<rope>;
  t.kv_write = attn_entry<kv_write>;
  t.attention = attn_entry<attention>;
  t.conv1d = ssm_entry<conv1d>;
  t.gdn = ssm_entry<gdn>;
  return t;
}

}  // namespace
}  // namespace pb::host_kernels

namespace pb {
const pb_kernel_table* host_kernel_table() {
  static const pb_kernel_table table = host_kernels::make_table();
  return &table;
}
}  // namespace pb
