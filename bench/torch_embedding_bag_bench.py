#!/usr/bin/python3
"""PyTorch nn.EmbeddingBag forward + backward on one thread (issue 18): the baseline of
bench/embedding_bag_vs_torch.sh, on the batches that build/bench/embedding_bag_bench wrote
(--write-data), so both sides pool the same bags.

Two variants, each with sum and mean pooling (mode), dense weights initialised to the row
values embedding_bag_bench gives them:
  - unique: each feature of each batch is an nn.EmbeddingBag (include_last_offset, dense
    gradient) whose weight is the batch's de-duplicated rows (unique x dim) and whose input is
    the inverse index with the same offsets: the same work as tandem's EmbeddingBagForward /
    EmbeddingBagBackward, which get the unique rows and the inverse too. The modules are made
    before the timing, so neither side pays for the de-duplication or for gathering the rows.
  - dedup: one nn.EmbeddingBag(vocab, dim, sparse=True) per feature on the raw ids, the sparse
    gradient then coalesced (weight.grad.coalesce(): the per-id sums), against tandem's step
    that de-duplicates the ids and gathers the unique rows itself. The JSON also carries
    uncoalesced_samples_per_s, the same without coalesce(), for reference only (no per-row sums).

Timed per step: the 8 features' forward, then one torch.autograd.backward over the 8 pooled
outputs with the fixed bag gradients (weight.grad set to None first, so every step writes a
fresh gradient, as tandem's overwrites d_rows). A run is --steps steps cycling over the
batches, after one untimed run; the figure is the median over --runs runs of samples/s.
torch.set_num_threads(1) and set_num_interop_threads(1).

Usage: torch_embedding_bag_bench.py --data FILE [--steps 8] [--runs 7] [--mode sum|mean|both]
         [--variant unique|dedup|both]
Prints one JSON line per mode (bench/bench_json.h's fields, baseline "none").
"""

import argparse
import json
import sys
import time

import numpy as np
import torch
from torch import nn


def read_data(path):
    """The batches of embedding_bag_bench --write-data: header, then per batch and feature
    (n, u, offsets[batch + 1], inverse[n], unique_ids[u]), all little-endian int64."""
    raw = np.fromfile(path, dtype="<i8")
    if raw[:1].tobytes() != b"TNDMBAG1":
        sys.exit(f"torch_embedding_bag_bench: {path}: not an embedding_bag_bench data file")
    batch, features, dim, batches, vocab, seed = (int(x) for x in raw[1:7])
    pos = 7
    data = []
    for _ in range(batches):
        feats = []
        for _ in range(features):
            n, u = int(raw[pos]), int(raw[pos + 1])
            pos += 2
            offsets = raw[pos:pos + batch + 1]
            pos += batch + 1
            inverse = raw[pos:pos + n]
            pos += n
            unique_ids = raw[pos:pos + u]
            pos += u
            feats.append((offsets, inverse, unique_ids))
        data.append(feats)
    if pos != len(raw):
        sys.exit(f"torch_embedding_bag_bench: {path}: {len(raw) - pos} trailing words")
    return dict(batch=batch, features=features, dim=dim, batches=batches, vocab=vocab,
                seed=seed, data=data)


def row_values(unique_ids, dim):
    """embedding_bag_bench's RowValue: exact multiples of 1/1024."""
    c = np.arange(dim, dtype=np.int64)
    v = (unique_ids[:, None] * 7919 + c[None, :] * 104729) % 2048 - 1024
    return torch.from_numpy((v.astype(np.float32) / np.float32(1024)))


def grad_values(f, batch, dim):
    """embedding_bag_bench's GradValue: exact multiples of 1/256."""
    s = np.arange(batch, dtype=np.int64)[:, None]
    c = np.arange(dim, dtype=np.int64)[None, :]
    v = (s * 31 + c * 17 + f * 7) % 256 - 128
    return torch.from_numpy(v.astype(np.float32) / np.float32(256))


def unique_bags(d, mode):
    """The unique variant: per batch and feature (module over the unique rows, inverse, offsets)."""
    bags = []
    for feats in d["data"]:
        per = []
        for offsets, inverse, unique_ids in feats:
            m = nn.EmbeddingBag.from_pretrained(row_values(unique_ids, d["dim"]), freeze=False,
                                                mode=mode, include_last_offset=True)
            per.append((m, torch.from_numpy(inverse.copy()), torch.from_numpy(offsets.copy())))
        bags.append(per)
    return bags


def full_bags(d, mode):
    """The dedup variant: one vocab x dim table per feature (sparse gradients), the raw ids."""
    table = row_values(np.arange(d["vocab"], dtype=np.int64), d["dim"])
    mods = [nn.EmbeddingBag.from_pretrained(table.clone(), freeze=False, mode=mode,
                                            include_last_offset=True, sparse=True)
            for _ in range(d["features"])]
    return [[(mods[f], torch.from_numpy(unique_ids[inverse]), torch.from_numpy(offsets.copy()))
             for f, (offsets, inverse, unique_ids) in enumerate(feats)] for feats in d["data"]]


def run_mode(d, bags, grads, steps, runs, coalesce):
    batch = d["batch"]

    def step(per):
        pooled = []
        for m, ids, offsets in per:
            m.weight.grad = None
            pooled.append(m(ids, offsets))
        torch.autograd.backward(pooled, grads)
        if coalesce:  # a sparse gradient's rows summed per id, as tandem's d_rows
            return pooled, [m.weight.grad.coalesce() for m, _, _ in per]
        return pooled, [m.weight.grad for m, _, _ in per]

    pooled, d_rows = step(bags[0])
    pooled_sum = float(sum(p.detach().double().sum() for p in pooled))
    d_rows_sum = float(sum((g._values() if g.is_sparse else g).double().sum() for g in d_rows))
    values = []
    for run in range(-1, runs):  # run -1: warm-up
        t0 = time.perf_counter()
        for s in range(steps):
            step(bags[s % len(bags)])
        seconds = time.perf_counter() - t0
        if run >= 0:
            values.append(batch * steps / seconds)
    return values, pooled_sum, d_rows_sum


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="embedding_bag_bench --write-data FILE")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--mode", choices=["sum", "mean", "both"], default="both")
    p.add_argument("--variant", choices=["unique", "dedup", "both"], default="both")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    d = read_data(a.data)
    lookups = sum(len(inv) for feats in d["data"] for _, inv, _ in feats) / d["batches"]
    unique = sum(len(u) for feats in d["data"] for _, _, u in feats) / d["batches"]
    print(f"torch_embedding_bag_bench: torch {torch.__version__}, {d['batches']} batches of "
          f"{d['batch']} x {d['features']} features, dim {d['dim']}, {lookups:.0f} lookups and "
          f"{unique:.0f} unique rows per batch", file=sys.stderr, flush=True)
    grads = [grad_values(f, d["batch"], d["dim"]) for f in range(d["features"])]
    for variant in ("unique", "dedup"):
        if a.variant not in (variant, "both"):
            continue
        for mode in ("sum", "mean"):
            if a.mode not in (mode, "both"):
                continue
            bags = unique_bags(d, mode) if variant == "unique" else full_bags(d, mode)
            values, pooled_sum, d_rows_sum = run_mode(d, bags, grads, a.steps, a.runs,
                                                      coalesce=variant == "dedup")
            value = float(np.median(values))
            fig = {
                "bench": f"torch_embedding_bag_{mode}{'_dedup' if variant == 'dedup' else ''}"
                         "_fwd_bwd_samples_per_s",
                "value": round(value, 1), "unit": "samples/s", "better": "higher",
                "baseline": "none", "baseline_value": 0, "ratio": 0.0,
                "bags_per_s": round(value * d["features"], 1),
                "runs": [round(v, 1) for v in values], "mode": mode, "variant": variant,
                "batch": d["batch"], "features": d["features"], "dim": d["dim"],
                "lookups_per_batch": round(lookups), "unique_per_batch": round(unique),
                "pooled_sum": pooled_sum, "d_rows_sum": d_rows_sum,
                "threads": torch.get_num_threads(), "torch": torch.__version__}
            if variant == "dedup":
                # For reference, not equivalent work: the sparse gradient left uncoalesced (one
                # row per lookup, no per-row sums), as it reaches a sparse optimizer.
                unc, _, _ = run_mode(d, bags, grads, a.steps, max(1, a.runs // 2), False)
                fig["uncoalesced_samples_per_s"] = round(float(np.median(unc)), 1)
            del bags
            print(json.dumps(fig), flush=True)

if __name__ == "__main__":
    main()
