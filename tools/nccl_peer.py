#!/usr/bin/env python3
"""Peer measurement of a bundle's collective tables through torch.distributed (NCCL).

For every (op, group size, bytes) in the bundle's collectives.csv files, times the same NCCL
operation on bf16 buffers over the first `group size` ranks with CUDA events (median of
--iterations after --warmup), then rank 0 writes a CSV and prints ours/peer per row.

One process per GPU, ranks from Open MPI or torchrun:
    mpirun -np 8 python3 tools/nccl_peer.py --ours OUT_ROOT/VARIANT --out peer.csv
    torchrun --nproc-per-node 8 tools/nccl_peer.py --ours OUT_ROOT/VARIANT --out peer.csv
Conventions match nccl-tests and the bundle: `bytes` is the whole buffer (the gathered size for
AllGather, the input for ReduceScatter); bus bandwidth factors (n-1)/n and 2(n-1)/n.
"""
import argparse
import csv
import glob
import os
import statistics
import sys

BUS_FACTOR = {"all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
              "all_reduce": lambda n: 2 * (n - 1) / n}


def env_int(names, default):
    for name in names:
        if name in os.environ:
            return int(os.environ[name])
    return default


def read_ours(variant_dir):
    files = sorted(glob.glob(os.path.join(variant_dir, "tp*", "collectives", "*", "collectives.csv")))
    if not files:
        sys.exit(f"nccl_peer: no tp*/collectives/*/collectives.csv under {variant_dir}")
    rows = []
    for f in files:
        with open(f, newline="") as fh:
            rows.extend(csv.DictReader(fh))
    return rows


def time_op(torch, dist, op, n, nbytes, group, iterations, warmup):
    elems = max(1, nbytes // 2)
    if op == "all_gather":
        chunk = max(1, elems // n)
        src = torch.randn(chunk, device="cuda").to(torch.bfloat16)
        dst = torch.empty(chunk * n, device="cuda", dtype=torch.bfloat16)
        run = lambda: dist.all_gather_into_tensor(dst, src, group=group)
    elif op == "reduce_scatter":
        chunk = max(1, elems // n)
        src = torch.randn(chunk * n, device="cuda").to(torch.bfloat16)
        dst = torch.empty(chunk, device="cuda", dtype=torch.bfloat16)
        run = lambda: dist.reduce_scatter_tensor(dst, src, group=group)
    elif op == "all_reduce":
        buf = torch.randn(elems, device="cuda").to(torch.bfloat16)
        run = lambda: dist.all_reduce(buf, group=group)
    else:
        raise ValueError(f"unknown op {op}")
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000.0)  # µs
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True, help="bundle variant directory (OUT_ROOT/VARIANT)")
    ap.add_argument("--out", required=True, help="CSV written by rank 0")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    rank = env_int(["OMPI_COMM_WORLD_RANK", "RANK", "PMI_RANK"], 0)
    world = env_int(["OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", "PMI_SIZE"], 1)
    local = env_int(["OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"], rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    rows = read_ours(args.ours)

    import torch
    import torch.distributed as dist

    torch.cuda.set_device(local)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    ours = {}
    for r in rows:
        key = (r["op"], int(r["group_size"]), int(r["bytes"]))
        if key[1] <= world and key[1] > 1:
            ours.setdefault(key, []).append(float(r["time_us"]))
    sizes = sorted({k[1] for k in ours})
    groups = {n: dist.new_group(ranks=list(range(n))) for n in sizes}  # every rank creates each
    out = []
    for op, n, nbytes in sorted(ours):
        if rank < n:
            us = time_op(torch, dist, op, n, nbytes, groups[n], args.iterations, args.warmup)
            if rank == 0:
                ours_us = statistics.median(ours[(op, n, nbytes)])
                bus = nbytes / (us * 1e-6) * BUS_FACTOR[op](n) / 1e9
                out.append((op, n, nbytes, ours_us, us, bus, ours_us / us))
        dist.barrier()
    if rank == 0:
        with open(args.out, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["op", "group_size", "bytes", "ours_us", "peer_us", "peer_busbw_gbps", "ours_over_peer"])
            w.writerows(out)
        print(f"{'op':<15}{'n':>3}{'bytes':>12}{'ours_us':>11}{'peer_us':>11}{'peer_busbw':>12}{'ours/peer':>11}")
        for op, n, nbytes, o, p, bus, ratio in out:
            print(f"{op:<15}{n:>3}{nbytes:>12}{o:>11.1f}{p:>11.1f}{bus:>12.1f}{ratio:>11.3f}")
        big = [r[6] for r in out if r[2] >= 1 << 20]
        if big:
            print(f"messages >= 1 MiB: {len(big)} rows, ours/peer {min(big):.3f} .. {max(big):.3f}")
        print(f"wrote {args.out}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
