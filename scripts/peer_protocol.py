#!/usr/bin/env python3
"""peer_protocol.py: the timing protocol of bench/bench_protocol.h, for the Python peers
(scripts/peer_torch.py, scripts/peer_fla.py), so that a peer is timed as ours is.
Invariant: one implementation of the protocol on the Python side; device-bench.sh passes
every peer and pb_bench_cuda / pb_bench_gdn_cuda the same values.

The protocol: rest `rest_ms` with the GPU idle, `warmup` untimed calls, then `repeat`
timed ones, each after an L2 flush (a write of twice the L2 size, outside the events)
when `l2` is "cold"; CUDA events around each call; the median. After the last sample it
reads the SM clock and the active throttle reasons (nvidia-smi; None where it cannot).
Run as a script, it prints the protocol its flags give (torch is needed only to time).
"""
import argparse
import statistics
import subprocess
import time

_flush = {}


def add_arguments(ap: argparse.ArgumentParser):
    """The protocol's flags, with bench/bench_protocol.h's defaults and names (--samples; --repeat too)."""
    ap.add_argument("--rest-ms", type=int, default=250)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--samples", "--repeat", dest="repeat", type=int, default=20)
    ap.add_argument("--l2", choices=["cold", "hot"], default="cold")


def gpu_clocks():
    """The SM clock (MHz) and the active throttle reasons (hex, gpu_idle masked off) now; None if unreadable."""
    import torch
    try:
        out = subprocess.run(["nvidia-smi", "-i", str(torch.cuda.current_device()),
                              "--query-gpu=clocks.sm,clocks_throttle_reasons.active", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.strip().split(",")
        return {"sm_mhz_end": int(out[0]), "throttle_end": int(out[1], 16) & ~1}
    except Exception:
        return None


def time_loop(fn, args):
    """fn timed under the protocol of args (rest_ms, warmup, repeat, l2): (median, min, max) ms and the clocks."""
    import torch
    if args.l2 == "cold" and "buf" not in _flush:
        l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        _flush["buf"] = torch.empty(2 * l2, dtype=torch.uint8, device="cuda") if l2 > 0 else None
    buf = _flush.get("buf") if args.l2 == "cold" else None
    torch.cuda.synchronize()
    time.sleep(args.rest_ms / 1000)
    for _ in range(args.warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for i in range(args.repeat):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if buf is not None:
            buf.fill_(i & 0xFF)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return statistics.median(times), min(times), max(times), gpu_clocks()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    a = parser.parse_args()
    print(f"rest {a.rest_ms} ms, {a.warmup} warm-ups, {a.repeat} samples, L2 {a.l2}")
