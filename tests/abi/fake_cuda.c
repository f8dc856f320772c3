/* fake_cuda.c: a complete table that says it runs on the CUDA device (its
 * entries only fail): on a machine without a CUDA device --kernels must refuse
 * it with exit 2 before anything runs. */
#include <stdio.h>
#include <string.h>

#include "prefill_bench/kernel_abi.h"

static pb_status fail(char* msg, size_t len) {
  if (msg && len) snprintf(msg, len, "fake-cuda computes nothing");
  return PB_ERR_INTERNAL;
}
static pb_status init(void** ctx, char* msg, size_t len) { (void)msg; (void)len; *ctx = NULL; return PB_OK; }
static pb_status teardown(void* ctx, char* msg, size_t len) { (void)ctx; (void)msg; (void)len; return PB_OK; }
static pb_status supports(void* ctx, const pb_layer_shape* s, char* why, size_t len) {
  (void)ctx; (void)s; (void)why; (void)len;
  return PB_OK;
}
static pb_status set_option(void* ctx, const char* k, const char* v, char* msg, size_t len) {
  (void)ctx; (void)k; (void)v;
  return fail(msg, len);
}
static pb_status describe(void* ctx, char* buf, size_t len) {
  (void)ctx;
  if (buf && len) snprintf(buf, len, "nothing");
  return PB_OK;
}
static pb_status workspace_bytes(void* ctx, const pb_layer_shape* s, const pb_batched_attn_metadata* m,
                                 uint64_t* bytes, char* msg, size_t len) {
  (void)ctx; (void)s; (void)m; (void)msg; (void)len;
  *bytes = 0;
  return PB_OK;
}
static pb_status attn_layer(void* ctx, const pb_attn_layer_args* a, void* st, char* msg, size_t len) {
  (void)ctx; (void)a; (void)st;
  return fail(msg, len);
}
static pb_status ssm_layer(void* ctx, const pb_ssm_layer_args* a, void* st, char* msg, size_t len) {
  (void)ctx; (void)a; (void)st;
  return fail(msg, len);
}

const pb_kernel_table* pb_kernel_table_get(void) {
  static pb_kernel_table t;
  memset(&t, 0, sizeof t);
  t.abi_version = PB_KERNEL_ABI_VERSION;
  t.struct_size = sizeof t;
  t.name = "fake-cuda";
  t.version = "0.0";
  t.device = PB_DEVICE_CUDA;
  t.init = init;
  t.teardown = teardown;
  t.supports = supports;
  t.set_option = set_option;
  t.describe = describe;
  t.workspace_bytes = workspace_bytes;
  t.attn_layer = attn_layer;
  t.ssm_layer = ssm_layer;
  return &t;
}
