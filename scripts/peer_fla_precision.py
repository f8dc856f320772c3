#!/usr/bin/env python3
"""peer_fla_precision.py: does flash-linear-attention's chunk_gated_delta_rule compute what the
harness's bf16-chunk64 lp says it does (docs/TOLERANCES.md "bf16-chunk64")? Run on a machine
with a CUDA device, torch and fla (FLA_PARENT names the folder holding fla/, as for
scripts/peer_fla.py).

Per (stream, v head) of three batches (fast and slow gates, d64 and d128, a carried state,
random bf16 q / k / v): fla's output and final state against hp (the float64 token
recurrence), over the limit the lp gives (2 |lp - hp| + 1e-5, docs/TOLERANCES.md's rule);
also over the fp32 token lp's limit, which a bf16 kernel should fail. The lp here is
reference/gdn_bf16_lp.cpp's arithmetic written in torch on the CPU (the same roundings;
torch's summation order, as a stand-in summing otherwise would). Exit 0 when fla sits within
the bf16-chunk64 limit on every figure, 1 when not.
Invariant: a change to reference/gdn_bf16_lp.cpp's rounding points is made here too.
"""
import math
import os
import sys

os.environ["FLA_DISABLE_TENSOR_CACHE"] = "1"  # before fla is imported
sys.path.insert(0, os.environ.get("FLA_PARENT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".fla")))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402
from fla.ops.utils import prepare_chunk_indices  # noqa: E402

b16 = lambda x: x.to(torch.bfloat16).to(x.dtype)

def norm(x):  # [T, d] -> L2-normalised as the kernels' norm (eps 1e-6 in ours; fla's l2norm eps 1e-6)
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)

def hp_head(q, k, v, g, beta, S):  # float64; S [dv][dk]
    q, k = norm(q.double()), norm(k.double()); v = v.double(); S = S.double().clone()
    out = torch.empty(q.shape[0], v.shape[1], dtype=torch.float64)
    for t in range(q.shape[0]):
        S = S * math.exp(float(g[t]))
        d = float(beta[t]) * (v[t] - S @ k[t])
        S = S + torch.outer(d, k[t])
        out[t] = S @ q[t] / math.sqrt(q.shape[1])
    return out, S

def fp32_head(q, k, v, g, beta, S):
    q, k = norm(q.float()), norm(k.float()); v = v.float(); S = S.float().clone()
    out = torch.empty(q.shape[0], v.shape[1])
    for t in range(q.shape[0]):
        S = S * math.exp(float(g[t]))
        d = float(beta[t]) * (v[t] - S @ k[t])
        S = S + torch.outer(d, k[t])
        out[t] = S @ q[t] / math.sqrt(q.shape[1])
    return b16(out), S

def lp_head(q, k, v, g, beta, S, C=64):  # reference/gdn_bf16_lp.cpp, sums in torch's order
    qn, kn = norm(q.float()), norm(k.float()); v = v.float(); S = S.float().clone()
    T_, dk = qn.shape; out = torch.empty(T_, v.shape[1])
    for c0 in range(0, T_, C):
        n = min(C, T_ - c0); sl = slice(c0, c0 + n)
        kb, qb, vv, gg, bb = b16(kn[sl]), b16(qn[sl]), v[sl], g[sl].float(), beta[sl].float()
        G = torch.cumsum(gg, 0)
        A = torch.tril(bb[:, None] * torch.exp(G[:, None] - G[None, :]) * (kb @ kb.T), -1)
        Tm = b16(torch.linalg.inv(torch.eye(n) + A))
        U = b16(Tm @ b16(bb[:, None] * vv)); W = b16(Tm @ b16((bb * torch.exp(G))[:, None] * kb))
        Sb = b16(S)
        V = U - W @ Sb.T
        M = b16(torch.tril(torch.exp(G[:, None] - G[None, :]) * (qb @ kb.T)))
        o = torch.exp(G)[:, None] * (qb @ Sb.T) + M @ b16(V)
        out[sl] = b16(o / math.sqrt(dk))
        E = b16(torch.exp(G[-1] - G)[:, None] * V)
        S = math.exp(float(G[-1])) * S + E.T @ kb
    return out, S

def case(name, lens, H, HV, d, slow, seed=13):
    T = sum(lens); gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, d, generator=gen).bfloat16().float()
    k = torch.randn(T, H, d, generator=gen).bfloat16().float()
    v = (torch.randn(T, HV, d, generator=gen) * 0.5).bfloat16().float()
    if slow: g = -(0.0005 + 0.0045 * torch.rand(T, HV, generator=gen))
    else: g = F.logsigmoid(torch.randn(T, HV, generator=gen) + 2.0)
    beta = torch.sigmoid(torch.randn(T, HV, generator=gen)).bfloat16().float()
    h0 = torch.randn(len(lens), HV, d, d, generator=gen) * 0.1  # [N, HV, dv, dk] (ours)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.long)
    dev = "cuda"
    o, ht = chunk_gated_delta_rule(q[None].to(dev).bfloat16(), k[None].to(dev).bfloat16(), v[None].to(dev).bfloat16(),
                                   g[None].to(dev), beta[None].to(dev).bfloat16(),
                                   initial_state=h0.transpose(-1, -2).contiguous().to(dev), output_final_state=True,
                                   cu_seqlens=cu.to(dev), cu_seqlens_cpu=cu, chunk_indices=prepare_chunk_indices(cu.to(dev), 64),
                                   use_qk_l2norm_in_kernel=True)
    o = o[0].float().cpu(); ht = ht.float().cpu().transpose(-1, -2)  # -> [N, HV, dv, dk]
    worst = {"lp": 0.0, "fp32": 0.0}
    errs = []
    for s in range(len(lens)):
        sl = slice(int(cu[s]), int(cu[s + 1]))
        for h in range(HV):
            kh = h // (HV // H)
            args = (q[sl, kh], k[sl, kh], v[sl, h], g[sl, h], beta[sl, h], h0[s, h])
            oh, Sh = hp_head(*args); ol, Sl = lp_head(*args); of, Sf = fp32_head(*args)
            e = lambda a, b: float((a.double() - b).abs().max())
            fo, fs = e(o[sl, h], oh), e(ht[s, h], Sh)
            for tag, (lo, ls) in {"lp": (e(ol, oh), e(Sl, Sh)), "fp32": (e(of, oh), e(Sf, Sh))}.items():
                worst[tag] = max(worst[tag], fo / (2 * lo + 1e-5), fs / (2 * ls + 1e-5))
            errs.append((fo, e(ol, oh), fs, e(Sl, Sh)))
    fo, lo, fs, ls = max(errs)
    print(f"{name}: fla / bf16-chunk64 limit {worst['lp']:.2f}, fla / fp32 limit {worst['fp32']:.2f}; "
          f"worst head: out fla {fo:.3g} lp {lo:.3g}, state fla {fs:.3g} lp {ls:.3g}", flush=True)
    return worst["lp"]

def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    worst = max(case("2 streams 300 + 130, 1 / 2 heads d64, fast gates", [300, 130], 1, 2, 64, False),
                case("1 stream 700, 1 / 2 heads d128, fast gates", [700], 1, 2, 128, False),
                case("1 stream 1500, 1 / 2 heads d64, slow gates (long memory)", [1500], 1, 2, 64, True))
    print(f"fla within the bf16-chunk64 limit: {'yes' if worst <= 1.0 else 'NO'} (worst {worst:.2f})")
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
