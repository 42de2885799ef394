#!/usr/bin/env python3
"""The experts path PyTorch users run, timed beside `harness bench experts` (issue 20's peer).

For every (model, N) row of a bench CSV (component experts, backend native) this builds the
grouped-GEMM MoE forward most PyTorch MoE code runs — argsort permutation of the routes, a gather
of the token rows, `grouped_mm` over the experts for W13, SiLU-and-mul, `grouped_mm` for W2, the
router weights, and an `index_add_` combine — on uniformly random routes (each token k distinct
experts, which is the bench's balanced routing in expectation) and measures it as the sum of its
kernels' durations from PyTorch's profiler (the same measure as the harness's CUPTI sums: launch
gaps excluded), median over iterations that rotate through weight banks so no expert's weights
stay in L2. The output is checked against an fp32 loop over experts first.

    python3 tools/torch-experts-peer.py --harness build/harness/harness --bench bench-experts.csv \\
        [--out torch-experts.csv] [--iterations 20] [--gemms] [--settle-ms 1500]

Prints one line per point with native / floor, native / cublas_grouped and native / torch, and
writes the CSV. Model geometry comes from `harness plan jobs/<model>.yaml --format json`.

`--gemms` also times the two GEMMs alone, where the point's lanes divide evenly over its experts
(balanced rows r = N*k/E): `grouped_mm` of W13 and of W2 on rows already sorted by expert
(PyTorch's grouped GEMM, no permutation), and `torch.bmm` of the same per-expert shapes
([E, r, H] x [E, H, 2I] and [E, r, I] x [E, I, H]: cuBLAS's batched GEMM on contiguous rows).
Each is run for `--settle-ms` of wall time first, as `harness bench` settles a point, so a point
under the power cap is timed at the clock it settles to; the SM clock after each timed iteration
is read through NVML where PyTorch can. Beside them: native's W13 and W2 kernels from the bench
CSV. That separates what the shapes allow on this GPU (the vendor's GEMMs) from what the MoE
around them costs.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def geometry(harness, model):
    job = os.path.join(ROOT, "jobs", f"{model}.yaml")
    plan = subprocess.run([harness, "plan", job, "--format", "json"], capture_output=True, text=True, check=True)
    g = json.loads(plan.stdout)["geometry"]
    return g["hidden_size"], g["moe_intermediate_size"], g["num_experts"], g["top_k"]


def grouped_mm(a, b, offs):
    # F.grouped_mm where PyTorch has it, else the private op it wraps.
    if hasattr(F, "grouped_mm"):
        return F.grouped_mm(a, b, offs=offs)
    return torch._grouped_mm(a, b, offs=offs)


def forward(x, ids, weights, w13, w2):
    n, k = ids.shape
    inter = w2.shape[2]
    flat = ids.flatten()
    order = torch.argsort(flat)
    token = order // k
    counts = torch.bincount(flat, minlength=w13.shape[0])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    h = grouped_mm(x[token], w13.transpose(-2, -1), offs)
    act = F.silu(h[:, :inter]) * h[:, inter:]
    y = grouped_mm(act, w2.transpose(-2, -1), offs)
    y = y * weights.flatten()[order].unsqueeze(1).to(y.dtype)
    return torch.zeros(n, x.shape[1], dtype=torch.float32, device=x.device).index_add_(0, token, y.float())


def reference(x, ids, weights, w13, w2):
    inter = w2.shape[2]
    out = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float32, device=x.device)
    for e in torch.unique(ids).tolist():
        rows, slots = (ids == e).nonzero(as_tuple=True)
        h = x[rows].float() @ w13[e].float().t()
        act = (F.silu(h[:, :inter]) * h[:, inter:]).to(torch.bfloat16).float()
        out.index_add_(0, rows, (act @ w2[e].float().t()) * weights[rows, slots].unsqueeze(1))
    return out


def routes(n, e, k, gen):
    ids = torch.rand(n, e, generator=gen, device="cuda").topk(k, dim=1).indices
    weights = torch.softmax(torch.randn(n, k, generator=gen, device="cuda"), dim=1)
    return ids, weights


def kernel_sum_us(fn):
    """Sum of the device-side durations of everything `fn` ran on the GPU, in microseconds."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    durations = [e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA]
    return float(sum(durations)), len(durations)


def settle(fn, settle_ms):
    """Runs `fn` back to back for `settle_ms` of wall time, so the clocks settle under its load."""
    end = time.monotonic() + settle_ms / 1000.0
    while time.monotonic() < end:
        for _ in range(8):
            fn()
        torch.cuda.synchronize()


def sm_clock_mhz():
    try:
        return torch.cuda.clock_rate()
    except Exception:  # no NVML binding in this PyTorch
        return None


def timed(fns, iterations, settle_ms):
    """Median kernel-duration sum (µs) over `iterations`, rotating through `fns` (one per weight
    bank), after a settle; with the median SM clock after the timed iterations (or "")."""
    settle(fns[0], settle_ms)
    times, clocks = [], []
    for i in range(iterations):
        times.append(kernel_sum_us(fns[i % len(fns)])[0])
        clock = sm_clock_mhz()
        if clock:
            clocks.append(clock)
    return statistics.median(times), (statistics.median(clocks) if clocks else "")


def native_gemms_us(kernels):
    """Native's W13 and W2 kernel times from a bench CSV's `kernels` column (launch order)."""
    gemms = [float(v) for name, v in (part.rsplit("=", 1) for part in kernels.split(";"))
             if name.startswith("expert_gemm")]
    return (gemms[0], gemms[1]) if len(gemms) == 2 else ("", "")


def gemm_rows(n, hidden, inter, experts, k, w13, w2, nat, iterations, settle_ms, gen):
    """The two GEMMs alone at balanced rows: grouped_mm and bmm, beside native's kernels."""
    lanes = n * k
    if lanes % experts:
        return {}
    r = lanes // experts
    flops13, flops2 = 2.0 * lanes * hidden * 2 * inter, 2.0 * lanes * inter * hidden
    x = torch.randn(lanes, hidden, generator=gen, device="cuda").to(torch.bfloat16)
    act = torch.randn(lanes, inter, generator=gen, device="cuda").to(torch.bfloat16)
    offs = torch.arange(1, experts + 1, device="cuda", dtype=torch.int32) * r
    xb, actb = x.view(experts, r, hidden), act.view(experts, r, inter)
    arms = {
        "grouped_w13": [lambda b=b: grouped_mm(x, b.transpose(-2, -1), offs) for b in w13],
        "grouped_w2": [lambda b=b: grouped_mm(act, b.transpose(-2, -1), offs) for b in w2],
        "bmm_w13": [lambda b=b: torch.bmm(xb, b.transpose(-2, -1)) for b in w13],
        "bmm_w2": [lambda b=b: torch.bmm(actb, b.transpose(-2, -1)) for b in w2],
    }
    row = dict(rows_per_expert=r)
    row["native_w13_us"], row["native_w2_us"] = native_gemms_us(nat["kernels"])
    for name, fns in arms.items():
        us, clock = timed(fns, iterations, settle_ms)
        row[f"{name}_us"], row[f"{name}_sm_mhz"] = round(us, 2), clock
    for prefix in ("native", "grouped", "bmm"):
        for gemm, flops in (("w13", flops13), ("w2", flops2)):
            us = row[f"{prefix}_{gemm}_us"]
            row[f"{prefix}_{gemm}_tflops"] = round(flops / us / 1e6, 1) if us else ""
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--harness", required=True)
    ap.add_argument("--bench", required=True, help="CSV written by harness bench experts")
    ap.add_argument("--out", default="torch-experts.csv")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--gemms", action="store_true",
                    help="also time the two GEMMs alone: grouped_mm and bmm at balanced rows")
    ap.add_argument("--settle-ms", type=float, default=1500.0,
                    help="wall time each --gemms arm runs before it is timed")
    args = ap.parse_args()
    if args.iterations < 1 or args.settle_ms < 0:
        sys.exit("--iterations must be at least 1 and --settle-ms not negative")

    bench = [r for r in csv.DictReader(open(args.bench)) if r["component"] == "experts"]
    native = {(r["model"], int(r["tokens"])): r for r in bench if r["backend"] == "native"}
    cublas = {(r["model"], int(r["tokens"])): r for r in bench if r["backend"] == "cublas_grouped"}
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    gen = torch.Generator(device="cuda").manual_seed(20)
    rows = []
    for model in dict.fromkeys(m for m, _ in native):
        hidden, inter, experts, k = geometry(args.harness, model)
        bank_bytes = experts * 3 * hidden * inter * 2
        free = torch.cuda.mem_get_info()[0]
        banks = max(2, min(4, int(0.6 * free // bank_bytes)))
        scale = hidden ** -0.5
        w13 = [torch.randn(experts, 2 * inter, hidden, generator=gen, device="cuda", dtype=torch.bfloat16).mul_(scale)
               for _ in range(banks)]
        w2 = [torch.randn(experts, hidden, inter, generator=gen, device="cuda", dtype=torch.bfloat16)
              .mul_(inter ** -0.5) for _ in range(banks)]
        # Correctness on a small point, against an fp32 loop over experts.
        x = torch.randn(24, hidden, generator=gen, device="cuda").to(torch.bfloat16)
        ids, weights = routes(24, experts, k, gen)
        got, want = forward(x, ids, weights, w13[0], w2[0]), reference(x, ids, weights, w13[0], w2[0])
        err = ((got - want).norm() / want.norm()).item()
        if not err < 2e-2:
            sys.exit(f"{model}: the torch path is off the reference by {err:.3g} (relative norm)")
        for (m, n), nat in sorted(native.items(), key=lambda kv: kv[0][1]):
            if m != model:
                continue
            x = torch.randn(n, hidden, generator=gen, device="cuda").to(torch.bfloat16)
            ids, weights = routes(n, experts, k, gen)
            for b in range(banks):  # warm-up: allocator, cuBLAS handles, every bank once
                forward(x, ids, weights, w13[b], w2[b])
            torch.cuda.synchronize()
            times, kernels = [], 0
            for i in range(args.iterations):
                b = i % banks
                t, kernels = kernel_sum_us(lambda: forward(x, ids, weights, w13[b], w2[b]))
                times.append(t)
            torch_us = statistics.median(times)
            nat_us, floor_us = float(nat["median_us"]), float(nat["floor_us"])
            cub = cublas.get((m, n))
            row = dict(model=m, tokens=n, activated=int(torch.unique(ids).numel()), bench_activated=int(nat["activated"]),
                       banks=banks, l2_bytes=l2, torch_us=round(torch_us, 2), torch_min_us=round(min(times), 2),
                       torch_max_us=round(max(times), 2), torch_kernels=kernels, native_us=nat_us, floor_us=floor_us,
                       cublas_us=float(cub["median_us"]) if cub else "", reference_error=f"{err:.2e}",
                       native_over_floor=round(nat_us / floor_us, 3),
                       native_over_cublas=round(nat_us / float(cub["median_us"]), 3) if cub else "",
                       native_over_torch=round(nat_us / torch_us, 3))
            rows.append(row)
            print(f"{m:16s} N={n:5d} A={row['activated']:3d} torch {torch_us:9.1f} us ({kernels} kernels)  "
                  f"native {nat_us:9.1f}  native/floor {row['native_over_floor']:.2f}  "
                  f"native/cublas {row['native_over_cublas']}  native/torch {row['native_over_torch']:.2f}", flush=True)
            if args.gemms:
                g = gemm_rows(n, hidden, inter, experts, k, w13, w2, nat, args.iterations, args.settle_ms, gen)
                row.update(g)
                if g:
                    print(f"{'':16s}   GEMMs alone at {g['rows_per_expert']} rows/expert, W13 / W2 µs (TFLOP/s): "
                          f"native {g['native_w13_us']} / {g['native_w2_us']} "
                          f"({g['native_w13_tflops']} / {g['native_w2_tflops']}), "
                          f"grouped_mm {g['grouped_w13_us']} / {g['grouped_w2_us']} "
                          f"({g['grouped_w13_tflops']} / {g['grouped_w2_tflops']}, "
                          f"{g['grouped_w13_sm_mhz']} / {g['grouped_w2_sm_mhz']} MHz), "
                          f"bmm {g['bmm_w13_us']} / {g['bmm_w2_us']} "
                          f"({g['bmm_w13_tflops']} / {g['bmm_w2_tflops']}, "
                          f"{g['bmm_w13_sm_mhz']} / {g['bmm_w2_sm_mhz']} MHz)", flush=True)
        w13 = w2 = None  # free this model's weights before the next one's
        torch.cuda.empty_cache()
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
