/* kernel_abi.h: the public C ABI between prefill-bench (the harness) and a
 * library of batched prefill kernels (an attention layer and an SSM / Gated
 * DeltaNet layer over several token streams, one launch per layer kernel).
 * C99 and C++; fixed-width types only; no C++ types or exceptions cross it.
 * A library exports one symbol, pb_kernel_table_get, returning its table.
 * docs/KERNEL-ABI.md states the full contract; the rules in brief:
 *  - Memory: the harness allocates, owns, uploads, poisons and reads back every
 *    buffer. A library allocates nothing per call: what it needs beyond the
 *    arguments it asks for through workspace_bytes and receives as `workspace`.
 *  - Writes: a library may write only `out`, the K/V caches at the staged slots,
 *    conv_state, the h_state storage reached through h_state_ptrs, and its
 *    workspace. Everything else (inputs, metadata, scratch, block tables) is
 *    read-only. The metadata's device arrays are the truth; their host copies
 *    are for planning only (work lists, grid sizes).
 *  - Addresses are u64: device pointers for a PB_DEVICE_CUDA library, host
 *    pointers for a PB_DEVICE_HOST one. Every tensor is contiguous row-major,
 *    its start aligned to 256 bytes; stride[] states it in elements.
 *  - Streams and threads: `stream` is a cudaStream_t for a CUDA library (the
 *    harness makes the device current and times with events on that stream;
 *    enqueue everything on it, never synchronise the device, allocate nor
 *    free), NULL for a host library (finish the work before returning; worker
 *    threads inside a call are fine). One context is used by one thread at a time.
 *  - Errors: every function returns a pb_status; on anything but PB_OK it
 *    writes a NUL-terminated reason into msg (at most msg_len bytes, msg may be
 *    NULL when msg_len is 0). No function may abort, exit or throw.
 *  - Versions: PB_KERNEL_ABI_VERSION changes only on an incompatible change; a
 *    compatible growth appends fields and is told apart by struct_size. */
#ifndef PREFILL_BENCH_KERNEL_ABI_H
#define PREFILL_BENCH_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PB_KERNEL_ABI_VERSION 1u
#define PB_KERNEL_TABLE_SYMBOL "pb_kernel_table_get"

/* ---- status ------------------------------------------------------------ */
typedef enum pb_status {
  PB_OK = 0,
  PB_ERR_UNSUPPORTED = 1, /* a shape, option, variant or entry the library does not offer */
  PB_ERR_INVALID = 2,     /* an argument the library refuses (NULL, wrong dtype or shape) */
  PB_ERR_DEVICE = 3,      /* a CUDA launch or runtime error */
  PB_ERR_INTERNAL = 4     /* anything else (out of host memory, a broken invariant) */
} pb_status;

/* ---- tensors ----------------------------------------------------------- */
typedef enum pb_dtype {
  PB_DTYPE_BF16 = 1,
  PB_DTYPE_F32 = 2,
  PB_DTYPE_I32 = 3,
  PB_DTYPE_I64 = 4,
  PB_DTYPE_U32 = 5,
  PB_DTYPE_U64 = 6
} pb_dtype;

#define PB_TENSOR_MAX_DIMS 4
/* A dense tensor. shape[i] for i < ndim; stride[i] in elements (row-major
 * contiguous: stride[ndim-1] == 1). Unused dims are 0. */
typedef struct pb_tensor {
  uint64_t data;   /* address of element [0, 0, ...] */
  uint32_t dtype;  /* pb_dtype */
  uint32_t ndim;
  int64_t shape[PB_TENSOR_MAX_DIMS];
  int64_t stride[PB_TENSOR_MAX_DIMS];
} pb_tensor;

/* Scratch the library asked for (workspace_bytes). Poisoned by the harness
 * before each prepare; owned by the library from prepare until the layer's
 * last entry returns. */
typedef struct pb_workspace {
  uint64_t data;  /* 256-byte aligned; 0 when bytes == 0 */
  uint64_t bytes;
} pb_workspace;

/* ---- the engine's metadata (BatchedAttnMetadata, field for field) ------- */
/* One kernel-batched prefill chunk over batch_size streams, staged in one
 * scratch block. Device arrays (u64 addresses) hold the truth; N = batch_size,
 * T = total_tokens. Positions and slots are stacked in cu_seqlens order. */
typedef struct pb_batched_attn_metadata {
  uint64_t positions_stacked;   /* [T] u32 RoPE (text / MRoPE T) positions */
  uint64_t positions_h_stacked; /* [T] u32 MRoPE H positions; == positions_stacked without MRoPE */
  uint64_t positions_w_stacked; /* [T] u32 MRoPE W positions; == positions_stacked without MRoPE */
  uint64_t slot_stacked;        /* [T] i64 KV cache slot: block_id * block_size + p % block_size */
  uint64_t block_table_ptrs;    /* [N] u64, each -> that stream's block table, i32 block ids */
  uint64_t seq_len_ptrs;        /* [N] u64, each -> that stream's i32 seq_len (== kv_lens[b]) */
  uint32_t batch_size;          /* N */
  uint32_t chunk_len;           /* the largest per-stream token count */
  uint32_t total_tokens;        /* T == cu_seqlens_host[N] */
  uint64_t cu_seqlens;          /* [N + 1] i32 prefix sum of per-stream token counts */
  const int32_t* cu_seqlens_host;  /* host copy of cu_seqlens (planning only) */
  uint32_t cu_seqlens_host_count;  /* N + 1 */
  uint64_t kv_lens;             /* [N] i32 per-stream KV length: chunk start + token count */
  const int32_t* kv_lens_host;  /* host copy of kv_lens (planning only) */
  uint32_t kv_lens_host_count;  /* N */
  uint32_t max_blocks_per_seq;  /* the largest block count of any stream */
  uint64_t staged_bytes;        /* bytes of the block in scratch (the caller's cursor advance) */
} pb_batched_attn_metadata;

/* ---- model shapes ------------------------------------------------------ */
typedef struct pb_attn_shape {
  int32_t num_q_heads, num_kv_heads, head_dim; /* q head h reads kv head h / (Hq / Hkv) */
  int32_t rotary_dim;         /* NeoX rotate-half over dims [0, rotary_dim); the rest pass through */
  float rope_theta;           /* inv_freq[i] = theta^(-2i/rotary_dim), in double rounded to float */
  uint32_t mrope_enabled;     /* 0/1 */
  uint32_t mrope_interleaved; /* 0: sectioned T|H|W; 1: interleaved (Qwen3-VL) */
  int32_t mrope_sections[3];  /* frequencies per section T, H, W (sum = rotary_dim / 2) */
  int32_t block_size;         /* tokens per KV cache block */
  int32_t num_blocks;         /* physical blocks; an id outside [0, num_blocks) must not be dereferenced */
  int32_t poison_block;       /* the NaN-filled block each table's guard entry holds */
  float scale;                /* softmax scale, 1/sqrt(head_dim) */
} pb_attn_shape;

typedef struct pb_ssm_shape {
  int32_t num_k_heads, num_v_heads; /* v head h reads k head h / (Hv / Hk) */
  int32_t k_dim, v_dim;
  int32_t d_conv;             /* causal conv width; conv_state holds d_conv - 1 inputs */
  int32_t conv_dim;           /* 2 * num_k_heads * k_dim + num_v_heads * v_dim (q | k | v) */
} pb_ssm_shape;

typedef enum pb_layer_kind { PB_LAYER_ATTN = 1, PB_LAYER_SSM = 2 } pb_layer_kind;

typedef struct pb_layer_shape {
  uint32_t struct_size; /* sizeof(pb_layer_shape) as the harness built it */
  uint32_t kind;        /* pb_layer_kind: which of attn / ssm is meaningful */
  pb_attn_shape attn;
  pb_ssm_shape ssm;
} pb_layer_shape;

/* ---- layer arguments --------------------------------------------------- */
/* Attention layer: RoPE (MRoPE) on q and k at the staged positions, write the
 * roped k and v to the paged caches at slot_stacked, then paged varlen causal
 * GQA attention of each token over keys 0..p of its own stream (kv_lens[b],
 * block_table_ptrs[b]). Math: docs/KERNEL-ABI.md. */
typedef struct pb_attn_layer_args {
  uint32_t struct_size;  /* sizeof(pb_attn_layer_args) as the harness built it */
  uint32_t schedule;     /* 0: the normal work order; else another order of the same work (PB_CAP_SCHEDULE) */
  pb_batched_attn_metadata metadata;
  pb_attn_shape shape;
  pb_tensor q;        /* [T, Hq, D] bf16, before RoPE (read-only) */
  pb_tensor k;        /* [T, Hkv, D] bf16, before RoPE (read-only) */
  pb_tensor v;        /* [T, Hkv, D] bf16 (read-only) */
  pb_tensor out;      /* [T, Hq, D] bf16, poisoned before the call */
  pb_tensor k_cache;  /* [num_blocks, block_size, Hkv, D] bf16, roped keys; write only at staged slots */
  pb_tensor v_cache;  /* [num_blocks, block_size, Hkv, D] bf16 */
  pb_workspace workspace;
} pb_attn_layer_args;

/* SSM (Gated DeltaNet) layer: depthwise causal conv1d + SiLU over x with each
 * stream's conv_state before its first token (then the new conv_state), q/k
 * L2-normalised, the gated delta rule per (stream, v head) on the fp32 state
 * reached through h_state_ptrs[b], out = S q / sqrt(k_dim). */
typedef struct pb_ssm_layer_args {
  uint32_t struct_size;  /* sizeof(pb_ssm_layer_args) as the harness built it */
  uint32_t schedule;     /* as in pb_attn_layer_args */
  pb_batched_attn_metadata metadata;
  pb_ssm_shape shape;
  pb_tensor x;           /* [T, conv_dim] bf16 conv input, channels q | k | v (read-only) */
  pb_tensor g;           /* [T, Hv] f32 log decay, <= 0 (read-only) */
  pb_tensor beta;        /* [T, Hv] f32 in (0, 1) (read-only) */
  pb_tensor conv_weight; /* [conv_dim, d_conv] bf16 (read-only) */
  pb_tensor conv_state;  /* [N, conv_dim, d_conv - 1] bf16, oldest first; read then replaced */
  uint64_t h_state_ptrs; /* address of [N] u64 in scratch, each -> stream b's [Hv, v_dim, k_dim] f32 state */
  pb_tensor out;         /* [T, Hv, v_dim] bf16, poisoned before the call */
  pb_workspace workspace;
} pb_ssm_layer_args;

/* ---- the table --------------------------------------------------------- */
typedef enum pb_device { PB_DEVICE_HOST = 1, PB_DEVICE_CUDA = 2 } pb_device;

/* Capability flags. */
#define PB_CAP_SCHEDULE 0x1u /* honours a non-zero `schedule` (another order of the same work) */
/* Graph-safe (--graph): the layer's timed entries may be captured once into a
 * CUDA graph (a host library: their args struct recorded) and replayed on later
 * batches of the same bucket, with prepare_* run before every replay on the
 * current batch's args. So the timed entries read every per-batch value (counts,
 * boundaries, kv_lens, tables, work lists) from device memory, the metadata's
 * arrays or the workspace prepare wrote; they size grids only from the bucket's
 * constants (batch_size, total_tokens, shapes) and treat chunk_len and
 * max_blocks_per_seq as capacities; they never read the host copies, copy from
 * host memory or synchronise. workspace_bytes is the same for every batch of a
 * bucket. docs/KERNEL-ABI.md "Graph capture". */
#define PB_CAP_GRAPH 0x2u

typedef struct pb_kernel_table {
  uint32_t abi_version;   /* PB_KERNEL_ABI_VERSION the library was built with */
  uint32_t struct_size;   /* sizeof(pb_kernel_table) as the library was built */
  const char* name;       /* "acme-prefill" */
  const char* version;    /* the library's own version, "1.4.0" */
  uint32_t device;        /* pb_device */
  uint32_t capabilities;  /* PB_CAP_* */

  /* A context for one run; *ctx may stay NULL for a stateless library. */
  pb_status (*init)(void** ctx, char* msg, size_t msg_len);
  pb_status (*teardown)(void* ctx, char* msg, size_t msg_len);
  /* PB_OK when the library runs this layer shape; else PB_ERR_UNSUPPORTED and
   * its reason in why. The harness skips such a layer and reports the reason. */
  pb_status (*supports)(void* ctx, const pb_layer_shape* shape, char* why, size_t why_len);
  /* Variants ("attention" = "fp32") and fault switches ("fault" = "causal-off-by-one");
   * an unknown key or value: PB_ERR_UNSUPPORTED. Called after init, before any layer. */
  pb_status (*set_option)(void* ctx, const char* key, const char* value, char* msg, size_t msg_len);
  /* What runs, in words, NUL-terminated in buf: "attention=wgmma gdn=chunked-tf32". */
  pb_status (*describe)(void* ctx, char* buf, size_t buf_len);
  /* Workspace bytes one layer needs for this shape and metadata (0 is fine). Size from
   * the counts and host copies only: the harness also asks before any device array
   * exists (every address in the metadata 0), to check the estimate. */
  pb_status (*workspace_bytes)(void* ctx, const pb_layer_shape* shape,
                               const pb_batched_attn_metadata* metadata, uint64_t* bytes,
                               char* msg, size_t msg_len);
  /* Optional (NULL when absent): called before the entries of each run of a layer,
   * outside timing, with the same args; may plan from the host copies and fill
   * the workspace (work lists, tables), enqueued on `stream`. */
  pb_status (*prepare_attn)(void* ctx, const pb_attn_layer_args* args, void* stream,
                            char* msg, size_t msg_len);
  pb_status (*prepare_ssm)(void* ctx, const pb_ssm_layer_args* args, void* stream,
                           char* msg, size_t msg_len);
  /* The whole layer. */
  pb_status (*attn_layer)(void* ctx, const pb_attn_layer_args* args, void* stream,
                          char* msg, size_t msg_len);
  pb_status (*ssm_layer)(void* ctx, const pb_ssm_layer_args* args, void* stream,
                         char* msg, size_t msg_len);
  /* Optional per-kernel entries (NULL when absent). When all of a layer's are
   * present the harness may call them instead of the layer entry, in this order,
   * on the same args and workspace, to time each kernel; together they must do
   * exactly what the layer entry does. */
  pb_status (*rope)(void* ctx, const pb_attn_layer_args* args, void* stream, char* msg, size_t msg_len);
  pb_status (*kv_write)(void* ctx, const pb_attn_layer_args* args, void* stream, char* msg, size_t msg_len);
  pb_status (*attention)(void* ctx, const pb_attn_layer_args* args, void* stream, char* msg, size_t msg_len);
  pb_status (*conv1d)(void* ctx, const pb_ssm_layer_args* args, void* stream, char* msg, size_t msg_len);
  pb_status (*gdn)(void* ctx, const pb_ssm_layer_args* args, void* stream, char* msg, size_t msg_len);
  /* Optional (NULL, or a table too short to hold it: "fp32"): the arithmetic the
   * library's `kernel` ("gdn") uses for this layer shape, NUL-terminated in buf,
   * so the harness's same-precision reference, and so the numeric limit, follows
   * it (docs/TOLERANCES.md). Known names: "fp32" (fp32 products, bf16 rounding
   * where the math contract rounds) and "tf32-chunked" (the chunk's products
   * with tf32 operands over 32-token chunks, as kernels/gdn_chunked.cu),
   * "tf32-split" (the same in the context-parallel order of kernels/gdn_split.cu) and
   * "bf16-chunk64" (bf16 operands over 64-token chunks, as flash-linear-attention's
   * Triton chunk_gated_delta_rule rounds). Called after set_option. An unknown name is
   * refused by the harness before any layer runs. */
  pb_status (*precision)(void* ctx, const pb_layer_shape* shape, const char* kernel, char* buf,
                         size_t buf_len);
} pb_kernel_table;

/* The one symbol a library exports (PB_KERNEL_TABLE_SYMBOL). The table is
 * static: it outlives every context and never changes. */
typedef const pb_kernel_table* (*pb_kernel_table_get_fn)(void);

#if defined(_WIN32)
#define PB_KERNEL_EXPORT __declspec(dllexport)
#else
#define PB_KERNEL_EXPORT __attribute__((visibility("default")))
#endif

PB_KERNEL_EXPORT const pb_kernel_table* pb_kernel_table_get(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PREFILL_BENCH_KERNEL_ABI_H */
