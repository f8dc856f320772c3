#!/usr/bin/env python3
"""peer_fla.py: flash-linear-attention's chunk_gated_delta_rule (Triton) as the Gated DeltaNet
prefill peer, on the shapes of issue 13's table, beside ours (prefill-bench on the same shapes).
Invariant: SHAPES is the one list of those shapes; ours and fla both come from it.

fla is fetched, never vendored: FLA_PARENT names the folder holding fla/ (the device call
unpacks fla-0.5.2-ops.tar.gz there; see docs/DEVICE-NOTES.md). Timing as a user of fla would
run it at its best: bf16 q/k/v, fp32 state in and out, varlen through cu_seqlens with
cu_seqlens_cpu and precomputed chunk indices (else it syncs every call),
FLA_DISABLE_TENSOR_CACHE=1 (else a rewritten cu_seqlens is served stale indices), q/k
L2-normalised in the kernel, untimed calls first (fla autotunes on its first calls), then a
CUDA graph of one call replayed under the protocol of bench/bench_protocol.h
(scripts/peer_protocol.py: rest, warm-ups, then samples, each after an L2 flush under --l2
cold, CUDA events around each replay, the median; the SM clock after the last sample), the
values device-bench.sh gives every peer and ours. FLOPs: 4 * T * HV * d^2.

Usage:
  peer_fla.py scenarios DIR            write one prefill-bench scenario per shape (gdn only)
  peer_fla.py time --json OUT [--rest-ms 250] [--warmup 3] [--samples 20] [--l2 cold|hot] [NAMES]
                                       time fla per shape (NAMES: a subset, by name)
  peer_fla.py table --ours DIR --fla OUT.json
                                       the table: ours (DIR/<name>.json, prefill-bench reports,
                                       the gdn kernel's median) vs fla, FlashInfer's published ms
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_protocol import add_arguments, time_loop  # noqa: E402  (the one protocol, beside this file; no torch)

MIX = [7, 130, 511, 1024, 2048, 4096, 333, 8192]  # the docs/DEVICE-NOTES.md mixed batch

# name, stream lengths, k heads, v heads, d, FlashInfer's published H100 ms (flashinfer PRs
# #3788 / #3866, as issue 13 quotes them; None where it published none), its note.
SHAPES = [
    ("h16x32-d128-8x2048", [2048] * 8, 16, 32, 128, 0.20, "same FLOPs as the next row"),
    ("h16x64-d128-4x2048", [2048] * 4, 16, 64, 128, 0.203, ""),
    ("h16x32-d128-mixed", MIX, 16, 32, 128, None, ""),
    ("h16x32-d128-32x512", [512] * 32, 16, 32, 128, None, ""),
    ("h2x8-d128-2x4096", [4096] * 2, 2, 8, 128, 0.115, ""),
    ("h2x8-d128-1x65536", [65536], 2, 8, 128, 0.399, ""),
    ("h4x8-d64-8x2048", [2048] * 8, 4, 8, 64, None, ""),
]


def flops(lens, hv, d):
    return 4.0 * sum(lens) * hv * d * d


def write_scenarios(outdir):
    os.makedirs(outdir, exist_ok=True)
    for name, lens, h, hv, d, _, _ in SHAPES:
        if len(set(lens)) == 1:
            streams = f"  - generate: {{dist: fixed, count: {len(lens)}, tokens: {lens[0]}}}\n"
        else:
            streams = "".join(f"  - tokens: {n}\n" for n in lens)
        # The attention fields are required by the schema and unused by a gdn-only layer.
        text = (f"# peer_fla.py: issue 13 shape {name} (gdn only), ours beside fla\n"
                f"name: gdn-{name}\nseed: 13\nmodel:\n  num_q_heads: 2\n  num_kv_heads: 1\n  head_dim: 64\n"
                f"  block_size: 16\n  gdn: {{num_k_heads: {h}, num_v_heads: {hv}, k_dim: {d}, v_dim: {d}, d_conv: 4}}\n"
                f"layers:\n  pattern: [gdn]\nstreams:\n{streams}run: {{warmup: 3, repeat: 10}}\n")
        with open(os.path.join(outdir, name + ".yaml"), "w") as f:
            f.write(text)
    print(f"wrote {len(SHAPES)} scenarios to {outdir}")


def time_fla(out_path, names, args):
    os.environ["FLA_DISABLE_TENSOR_CACHE"] = "1"  # before fla is imported
    sys.path.insert(0, os.environ.get("FLA_PARENT", "."))
    import torch
    import torch.nn.functional as F
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    from fla.ops.utils import prepare_chunk_indices

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    rows = []
    for name, lens, h, hv, d, _, _ in SHAPES:
        if names and name not in names:
            continue
        r = {"name": name, "lens": len(lens), "tokens": sum(lens), "h": h, "hv": hv, "d": d,
             "flops": flops(lens, hv, d)}
        try:
            T = sum(lens)
            g = torch.Generator(device="cuda").manual_seed(13)
            q = torch.randn(1, T, h, d, device="cuda", generator=g).bfloat16()
            k = torch.randn(1, T, h, d, device="cuda", generator=g).bfloat16()
            v = torch.randn(1, T, hv, d, device="cuda", generator=g).bfloat16()
            gate = F.logsigmoid(torch.randn(1, T, hv, device="cuda", generator=g)).float()
            beta = torch.rand(1, T, hv, device="cuda", generator=g).sigmoid().bfloat16()
            h0 = torch.randn(len(lens), hv, d, d, device="cuda", generator=g).float() * 0.1
            cu_list = [0]
            for n in lens:
                cu_list.append(cu_list[-1] + n)
            cu = torch.tensor(cu_list, dtype=torch.long, device="cuda")
            cu_cpu = cu.cpu()
            ci = prepare_chunk_indices(cu, 64)
            fn = lambda: chunk_gated_delta_rule(q, k, v, gate, beta, initial_state=h0, output_final_state=True,
                                                cu_seqlens=cu, cu_seqlens_cpu=cu_cpu, chunk_indices=ci,
                                                use_qk_l2norm_in_kernel=True)
            for _ in range(5):  # fla autotunes on its first calls: outside every timing
                fn()
            r["eager_ms"] = time_loop(fn, args)[0]  # includes Python launch gaps
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            r["median_ms"], r["min_ms"], r["max_ms"], clk = time_loop(graph.replay, args)
            r.update(clk or {})
            r["tflops"] = r["flops"] / (r["median_ms"] * 1e9)
            print(f"fla {name:<22} graph {r['median_ms']:8.4f} ms ({r['min_ms']:.4f}..{r['max_ms']:.4f}) "
                  f"{r['tflops']:6.1f} TFLOP/s; eager {r['eager_ms']:.4f} ms; sm {r.get('sm_mhz_end', '?')} MHz, "
                  f"throttle {r.get('throttle_end', '?')}", flush=True)
            del graph, q, k, v, gate, beta, h0
            torch.cuda.empty_cache()
        except Exception as e:  # report the shape, go on with the next
            r["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(f"fla {name:<22} FAILED {r['error']}", flush=True)
        rows.append(r)
        with open(out_path, "w") as f:  # after every shape: a timeout keeps the shapes done
            json.dump({"schema": "prefill-bench.peer-fla/1", "fla": "0.5.2", "rest_ms": args.rest_ms,
                       "warmup": args.warmup, "repeat": args.repeat, "l2": args.l2, "rows": rows}, f, indent=1)
    return 0 if rows and all("error" not in r for r in rows) else 1


def ours_gdn_ms(path):
    """The gdn kernel's median (ms) of a prefill-bench JSON report, its verdict, and the SM clock
    (MHz) the report read after the run (None where it has none)."""
    try:
        rep = json.load(open(path))
    except Exception as e:
        return None, "missing" if isinstance(e, FileNotFoundError) else f"unreadable ({type(e).__name__})", None
    for run in rep.get("runs", []):
        mhz = run.get("clocks", {}).get("after", {}).get("sm_mhz")
        for t in run.get("timings", []):
            if t.get("kernel") == "gdn":
                return t.get("median_ms"), run.get("verdict", "?"), mhz
        return None, run.get("verdict", "?"), mhz
    return None, "no run", None


def table(ours_dir, fla_path):
    fla = {}
    if os.path.exists(fla_path):
        fla = {r["name"]: r for r in json.load(open(fla_path)).get("rows", [])}
    print("Gated DeltaNet prefill, ms (ours = prefill-bench --backend cuda, gdn kernel median, every check run; "
          "fla 0.5.2 = chunk_gated_delta_rule as a CUDA-graph replay under bench/bench_protocol.h's protocol; "
          "FlashInfer = its SM90 kernel on an H100 as published, not measured here; clocks = SM MHz after "
          "the last sample, ours / fla)")
    print(f"{'k / v heads, d':<16} {'batch':<10} {'ours ms':>8} {'verdict':<8} {'fla ms':>8} {'FlashInfer H100':>15} "
          f"{'ours / fla':>10} {'clocks':>11}")
    for name, lens, h, hv, d, fi, note in SHAPES:
        o, verdict, o_mhz = ours_gdn_ms(os.path.join(ours_dir, name + ".json"))
        f = fla.get(name, {}).get("median_ms")
        f_mhz = fla.get(name, {}).get("sm_mhz_end")
        batch = "mixed" if len(set(lens)) > 1 else f"{len(lens)}x{lens[0]}"
        ratio = f"{f / o:.2f}x" if o and f else "-"  # > 1: ours faster
        clocks = f"{o_mhz or '?'} / {f_mhz or '?'}"
        print(f"{f'{h} / {hv}, {d}':<16} {batch:<10} {o if o else float('nan'):8.3f} {verdict:<8} "
              f"{f if f else float('nan'):8.3f} {('%.3f' % fi) if fi else '':>15} {ratio:>10} {clocks:>11}"
              + (f"  ({note})" if note and fi else ""))
    print("ours / fla = fla ms over ours ms (speed of ours relative to fla: 1.00x = as fast, > 1 faster)")


def main(argv):
    if len(argv) >= 2 and argv[0] == "scenarios":
        write_scenarios(argv[1])
        return 0
    if len(argv) >= 3 and argv[0] == "time" and argv[1] == "--json":
        ap = argparse.ArgumentParser(prog="peer_fla.py time --json OUT")
        ap.add_argument("names", nargs="*")
        add_arguments(ap)
        args = ap.parse_args(argv[3:])
        return time_fla(argv[2], set(args.names), args)
    if len(argv) == 5 and argv[0] == "table" and argv[1] == "--ours" and argv[3] == "--fla":
        table(argv[2], argv[4])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
