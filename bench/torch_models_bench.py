#!/usr/bin/python3
"""The dense step of tandem's models in PyTorch on one thread (issue 19): the baseline of
bench/models_vs_torch.sh, beside build/bench/models_bench.

Per model, the twin of bench/torch_models.py built from a `models_bench --describe` line (the
same config, so the same shapes) and timed as models_bench times Model::ForwardBackward:
forward from the dense values and the pooled bags (one batch x dims[f] tensor per feature,
requires_grad, as tandem's pooled inputs arrive per feature), tandem's loss, and backward to the
parameters' and the bags' gradients (parameter .grad set to None first, so each step writes
fresh gradients as tandem overwrites its own). No optimizer step on either side. Random inputs,
a quarter of the labels 1 (as models_bench). A run is --steps steps after one untimed step; the
figure is the median over --runs runs of samples/s.

Threads: torch.set_num_threads(1), set_num_interop_threads(1), OMP_WAIT_POLICY=PASSIVE (see
bench/torch_dlrm_bench.py for why; one thread does not wait on anything, so it changes nothing
here but keeps the two baselines alike). OPENBLAS_NUM_THREADS and the glibc malloc settings
(bench/models_vs_torch.sh, --torch-malloc) come from the caller's environment.

Usage: torch_models_bench.py --describe FILE [--models a,b] [--batch 2048] [--steps 10]
         [--runs 5] [--threads 1]
Prints one JSON line per model (bench/bench_json.h's fields, baseline "none", plus details).
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import loss_fn, make_model  # noqa: E402


def bench(d, batch, steps, runs, seed):
    torch.manual_seed(seed)
    net = make_model(d)
    gen = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.rand(*shape, generator=gen) * 2 - 1
    dense = rand(batch, d["num_dense"])
    pooled = [rand(batch, w).requires_grad_() for w in d["dims"]]
    labels = torch.zeros(batch, d["num_labels"])
    labels.view(-1)[::4] = 1.0
    loss = loss_fn(d, batch)
    params = list(net.parameters())

    def step():
        for p in params:
            p.grad = None
        for p in pooled:
            p.grad = None
        loss(net(dense, pooled), labels).backward()

    step()
    sps = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sps.append(batch * steps / (time.perf_counter() - t0))
    return sps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--describe", required=True, help="`models_bench --describe` output")
    p.add_argument("--models", default="", help="comma-separated; default: every line")
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    wanted = set(filter(None, a.models.split(",")))
    with open(a.describe) as f:
        descs = [json.loads(line) for line in f if line.strip()]
    for d in descs:
        if wanted and d["model"] not in wanted:
            continue
        sps = bench(d, a.batch, a.steps, a.runs, a.seed)
        print(json.dumps({
            "bench": f"torch_{d['model']}_dense_step_samples_per_s",
            "value": round(float(np.median(sps)), 1), "unit": "samples/s", "better": "higher",
            "baseline": "none", "baseline_value": 0, "ratio": 0.0, "model": d["model"],
            "batch": a.batch, "threads": a.threads, "steps_per_run": a.steps,
            "runs": [round(x, 1) for x in sps], "num_params": d["num_params"],
            "torch": torch.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default")}), flush=True)


if __name__ == "__main__":
    main()
