#!/usr/bin/env python3
"""peer_torch.py: PyTorch's attention on the batches prefill-bench exports (lib/export.h,
schema prefill-bench.batch/1), as the peer our batched kernel must beat.

Per batch and per SDPA backend (flash, cuDNN, efficient): one
torch.nn.functional.scaled_dot_product_attention call per stream, bf16, causal
(bottom-right aligned through causal_lower_right when a stream continues a
cached prefix), contiguous K/V of kv_len keys (no paging), GQA through
enable_gqa=True, or K/V repeat_interleave'd to the q heads when a backend
refuses GQA (said in the output). For batches of equal streams also one batched
call ("<backend>/batched"). Also FlexAttention ("flex"): torch.compile'd
flex_attention, one launch over the packed batch (q and K/V of all streams
concatenated) with a document + causal mask_mod (a query at position
chunk_start + i sees its own stream's keys 0 .. chunk_start + i), enable_gqa=True;
the block mask is built and the kernel compiled before the timed region (the plan
step), K/V contiguous. torch.nn.attention.varlen.varlen_attn takes no
causal flag, so it is reported as skipped, not timed. Timing: the protocol of
bench/bench_protocol.h (scripts/peer_protocol.py), which pb_bench_cuda holds ours to
(device-bench.sh passes both the same values): rest --rest-ms with the GPU idle, --warmup untimed loops, then
--samples timed ones, each after an L2 flush (a write of twice the L2 size, outside the
events) under --l2 cold; CUDA events around the whole loop over streams; the median.
Each result also records the SM clock and throttle reasons after its last sample
(nvidia-smi; "" where it cannot be read).
FLOPs are counted as docs/DESIGN.md does: 4 * Hq * D * sum_i (chunk_start + i + 1).

Usage: peer_torch.py BATCH.json... [--json OUT.json] [--rest-ms 250] [--warmup 3] [--samples 20] [--l2 cold|hot]
                     [--flex REGEX]
  --flex: the batches FlexAttention runs on (re.search on the batch name; default all:
  each new shape costs a compile of ~20-25 s on the H200; "" runs none)
"""
import argparse
import json
import re
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_protocol import add_arguments, time_loop  # noqa: E402  (the one protocol, beside this file)

try:
    from torch.nn.attention.bias import causal_lower_right
except ImportError:  # older torch
    causal_lower_right = None

BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def flops_of(batch):
    hq, d = batch["model"]["num_q_heads"], batch["model"]["head_dim"]
    pairs = sum(s["count"] * s["chunk_start"] + s["count"] * (s["count"] + 1) / 2 for s in batch["streams"])
    return 4.0 * hq * d * pairs


def make_inputs(batch, gen):
    m = batch["model"]
    hq, hkv, d = m["num_q_heads"], m["num_kv_heads"], m["head_dim"]
    out = []
    for s in batch["streams"]:
        # Random data, never zeros: q, k in [-2, 2), v in [-1, 1) (as bench_cuda).
        q = (torch.rand(1, hq, s["count"], d, device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16)
        k = (torch.rand(1, hkv, s["kv_len"], d, device="cuda", generator=gen) * 4 - 2).to(torch.bfloat16)
        v = (torch.rand(1, hkv, s["kv_len"], d, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
        out.append((q, k, v, s["chunk_start"]))
    return out


def attend(q, k, v, chunk_start, gqa_mode, group):
    if gqa_mode == "repeat_interleave" and group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    kw = {"enable_gqa": True} if gqa_mode == "enable_gqa" and group > 1 else {}
    if chunk_start == 0:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
    if causal_lower_right is None:
        raise RuntimeError("no causal_lower_right in this torch: continuation chunks need it")
    mask = causal_lower_right(q.shape[-2], k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)


def run_backend(batch, inputs, name, backend, args, batched):
    m = batch["model"]
    group = m["num_q_heads"] // m["num_kv_heads"]
    if batched:  # one call over B equal streams
        q = torch.cat([x[0] for x in inputs]); k = torch.cat([x[1] for x in inputs]); v = torch.cat([x[2] for x in inputs])
        items = [(q, k, v, inputs[0][3])]
    else:
        items = inputs
    last_err = None
    for gqa_mode in (["enable_gqa", "repeat_interleave"] if group > 1 else ["none"]):
        try:
            with sdpa_kernel([backend]):
                # Refusals show on the first call; repeat_interleave copies stay outside the timing.
                if gqa_mode == "repeat_interleave":
                    items = [(q.contiguous(), k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), cs)
                             for q, k, v, cs in items]
                    mode = "none"
                else:
                    mode = gqa_mode
                for q, k, v, cs in items:
                    attend(q, k, v, cs, mode, group)
                torch.cuda.synchronize()

                def loop():
                    for q, k, v, cs in items:
                        attend(q, k, v, cs, mode, group)

                med, lo, hi, clk = time_loop(loop, args)
            return {"backend": name + ("/batched" if batched else ""), "gqa": gqa_mode, "median_ms": med,
                    "min_ms": lo, "max_ms": hi, "tflops": flops_of(batch) / (med * 1e9), "samples": args.repeat,
                    **(clk or {})}
        except Exception as e:  # a backend refusing the shape
            last_err = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            torch.cuda.synchronize()
    return {"backend": name + ("/batched" if batched else ""), "skipped": last_err}


def run_flex(batch, inputs, args):
    """FlexAttention over the packed batch in one call (see the module doc)."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        t0 = time.time()
        q = torch.cat([x[0] for x in inputs], dim=2)
        k = torch.cat([x[1] for x in inputs], dim=2)
        v = torch.cat([x[2] for x in inputs], dim=2)
        q_doc = torch.cat([torch.full((x[0].shape[2],), i, dtype=torch.int32) for i, x in enumerate(inputs)]).cuda()
        kv_doc = torch.cat([torch.full((x[1].shape[2],), i, dtype=torch.int32) for i, x in enumerate(inputs)]).cuda()
        q_pos = torch.cat([torch.arange(x[0].shape[2], dtype=torch.int32) + x[3] for x in inputs]).cuda()
        kv_pos = torch.cat([torch.arange(x[1].shape[2], dtype=torch.int32) for x in inputs]).cuda()

        def mask_mod(b, h, q_idx, kv_idx):
            return (q_doc[q_idx] == kv_doc[kv_idx]) & (q_pos[q_idx] >= kv_pos[kv_idx])

        bm = create_block_mask(mask_mod, B=None, H=None, Q_LEN=q.shape[2], KV_LEN=k.shape[2], device="cuda")
        flex = torch.compile(flex_attention, dynamic=False)
        gqa = q.shape[1] != k.shape[1]
        fn = lambda: flex(q, k, v, block_mask=bm, enable_gqa=gqa)
        fn()
        torch.cuda.synchronize()
        setup = time.time() - t0
        med, lo, hi, clk = time_loop(fn, args)
        return {"backend": "flex", "gqa": "enable_gqa" if gqa else "none", "median_ms": med, "min_ms": lo,
                "max_ms": hi, "tflops": flops_of(batch) / (med * 1e9), "samples": args.repeat,
                "setup_s": setup, **(clk or {})}
    except Exception as e:  # a torch without FlexAttention, or a compile failure
        torch.cuda.synchronize()
        return {"backend": "flex", "skipped": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("batches", nargs="+")
    ap.add_argument("--json", default="")
    add_arguments(ap)
    ap.add_argument("--flex", default=".")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    try:
        import torch.nn.attention.varlen as tv
        fn = tv.varlen_attn
    except Exception:
        fn = None
    if fn is None:
        varlen = "torch.nn.attention.varlen.varlen_attn: not in this torch"
    else:
        try:
            import inspect
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = None
        if params is not None and any("causal" in p for p in params):
            varlen = (f"torch.nn.attention.varlen.varlen_attn({', '.join(params)}) has a causal argument: "
                      "not timed by this script yet")
        else:
            sig = f"({', '.join(params)})" if params is not None else ""
            varlen = f"torch.nn.attention.varlen.varlen_attn{sig} takes no causal flag: skipped (not comparable)"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}; {varlen}")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    results = []
    t0 = time.time()
    for path in args.batches:
        batch = json.load(open(path))
        name = batch["name"].removeprefix("bench-")
        inputs = make_inputs(batch, gen)
        equal = len({(s["chunk_start"], s["count"]) for s in batch["streams"]}) == 1 and len(batch["streams"]) > 1
        runs = [(lambda b=backend, n=bname, bt=batched: run_backend(batch, inputs, n, b, args, bt))
                for bname, backend in BACKENDS for batched in ([False, True] if equal else [False])]
        if args.flex and re.search(args.flex, name):
            runs.append(lambda: run_flex(batch, inputs, args))
        for run in runs:
            r = run()
            r.update({"batch": name, "flops": flops_of(batch)})
            results.append(r)
            if "skipped" in r:
                print(f"{name:<32} {r['backend']:<18} skipped: {r['skipped']}")
            else:
                print(f"{name:<32} {r['backend']:<18} {r['median_ms']:9.4f} ms {r['tflops']:7.1f} TFLOP/s "
                      f"(gqa {r['gqa']}, min {r['min_ms']:.4f} max {r['max_ms']:.4f}, "
                      f"sm {r.get('sm_mhz_end', '?')} MHz, throttle {r.get('throttle_end', '?')})")
            sys.stdout.flush()
        del inputs
        torch.cuda.empty_cache()
    doc = {"schema": "prefill-bench.peer/1", "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
           "varlen_attn": varlen, "rest_ms": args.rest_ms, "warmup": args.warmup, "repeat": args.repeat,
           "l2": args.l2, "results": results,
           "wall_s": time.time() - t0}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
