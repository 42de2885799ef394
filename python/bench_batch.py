"""Batch lookup throughput of the Python package: 100k experts queries in one query_batch call.
    python python/bench_batch.py VARIANT_DIR [TP DP]
Prints the time of the batch (median of 5) and queries per second."""
import json
import sys
import time

import numpy as np

import harness_lookup as hl

variant = sys.argv[1]
tp, dp = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (1, 1)
bundle = hl.Bundle(variant, tp, dp)
g = json.loads(bundle.contract_json)
e, k, l = g["geometry"]["num_experts"], g["geometry"]["top_k"], g["expert_ownership"]["local_experts"]
rng = np.random.default_rng(1)
count = 100_000
n = rng.integers(1, 64, count, dtype=np.int64)
a = np.minimum(rng.integers(1, l + 1, count, dtype=np.int64), np.maximum(1, n * k))
lo = np.maximum(a, n * max(0, k - (e - l)))
m = np.minimum(np.maximum(lo, n * np.minimum(k, a)), n * np.minimum(k, a))
times = []
for _ in range(5):
    t0 = time.perf_counter()
    out = bundle.query_batch("experts", n, a, m)
    times.append(time.perf_counter() - t0)
answered = int(np.count_nonzero(~np.isnan(out)))
best = sorted(times)[len(times) // 2]
print(f"query_batch: {count} experts queries in {best * 1e3:.1f} ms (median of 5), "
      f"{count / best / 1e6:.2f} M queries/s, {answered} inside the support")
