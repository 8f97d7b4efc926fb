#!/usr/bin/python3
"""Single-process PyTorch DLRM with tandem's model shape and math (issue "Huge tables for real").

The baseline of bench/dlrm_vs_torch.sh: the same synthetic data as the `tandem local` job
(a `tandem datagen --format binary` file, read here with numpy), trained in one process on
Debian's python3-torch (scripts/setup.sh bench), with what matters for speed matching tandem's
worker/model/ and common/embedding/:

  - 13 dense features -> bottom MLP (default 64-16, ReLU after every layer, the last included,
    like Dlrm's bottom_(..., relu_last=true));
  - 26 categorical fields, each its own embedding table of dim 16 (torch.nn.EmbeddingBag, sum
    pooling, sparse=True gradients; one id per field and sample, as in the data), sparse Adagrad
    (lr, initial accumulator as tables.default.*; tandem's has no eps, torch's 1e-10 is kept);
  - dot interaction as DotInteraction: x_0 = bottom output, x_{t+1} = pooled[t], output
    [x_0, <x_i, x_j> for i < j in row-major strict-upper-triangle order], width 16 + 27*26/2;
  - top MLP (default 128-64-1, ReLU except after the logit), BCE-with-logits averaged over the
    batch (tandem: sum of per-sample losses / the nominal global batch);
  - dense weights Glorot-uniform, biases 0, Adam (train.dense_lr, betas 0.9/0.999, eps 1e-8);
    embedding rows uniform(-scale, scale) (tables.default.init).

Data: the file is read once with numpy (not timed), every field's 64-bit ids are renumbered to
0..n-1 (np.unique; a table holds exactly the ids the data has, like a PS that admits on first
push), and the records are put in one random order (an epoch, like tandem's permuted order);
step s trains on records [s*B, (s+1)*B) of that order, so `--steps S` with S*B <= rows sees each
record at most once. Per-step cost therefore excludes data parsing (tandem's pipeline does that
in a prefetch thread) and includes slicing the batch out of memory.

Timing: samples/s per window of --log-every steps (time.perf_counter around the steps, like
tandem's metrics.jsonl step lines), the first --warmup steps left out; the figure is the median
of the remaining windows, mean_samples_per_sec the steady part's samples over its wall time.
The step's time breakdown (forward, backward, dense and sparse optimizer) goes to stderr.

Threads: torch.set_num_threads(--threads) and OMP_WAIT_POLICY=PASSIVE (see below the imports).

Usage: torch_dlrm_bench.py --data TRAIN.bin [--eval EVAL.bin] [--steps 300] [--batch 2048]
         [--warmup 50] [--log-every 10] [--threads 2] [--tables separate|fused]
         [--omp-wait-default] ...
Prints one JSON line (bench/bench_json.h's fields plus details).
"""

import argparse
import json
import os
import sys
import time

# Debian's torch runs its ops on a libgomp pool and its GEMMs on OpenBLAS's own pthread pool
# (libblas.so.3 -> openblas-pthread); both spin after their work by default, and on a 2-core
# machine the spinning pool starves the other: the dense Adam step took 7-8 ms instead of
# 0.8 ms, and the whole step about twice as long. Passive OpenMP waits remove that (as does
# OPENBLAS_NUM_THREADS=1), so the baseline runs with them unless the caller chose a policy or
# passed --omp-wait-default. libgomp reads the variable when it loads, i.e. at `import torch`.
if "--omp-wait-default" not in sys.argv:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

HEADER_BYTES = 64
MAGIC = b"TNDMDATA"


def read_binary(path):
    """A tandem binary data file (worker/data/binary_format.h) as a numpy record array (memmap)."""
    with open(path, "rb") as f:
        header = f.read(HEADER_BYTES)
    if len(header) < HEADER_BYTES or header[:8] != MAGIC:
        sys.exit(f"torch_dlrm_bench: {path}: not a tandem binary data file")
    version, num_dense, num_cat, record_size = np.frombuffer(header, "<u4", 4, 8)
    (count,) = np.frombuffer(header, "<u8", 1, 24)
    if version != 1:
        sys.exit(f"torch_dlrm_bench: {path}: unsupported version {version}")
    dtype = np.dtype([("label", "<f4"), ("weight", "<f4"), ("dense", "<f4", (num_dense,)),
                      ("cat", "<u8", (num_cat,))])
    if dtype.itemsize != record_size:
        sys.exit(f"torch_dlrm_bench: {path}: record size {record_size} != {dtype.itemsize}")
    if os.path.getsize(path) != HEADER_BYTES + int(count) * record_size:
        sys.exit(f"torch_dlrm_bench: {path}: size disagrees with the header's count {count}")
    return np.memmap(path, dtype=dtype, mode="r", offset=HEADER_BYTES, shape=(int(count),))


def glorot_(linear):
    nn.init.xavier_uniform_(linear.weight)
    nn.init.zeros_(linear.bias)


def mlp(sizes, relu_last):
    layers = []
    for i in range(1, len(sizes)):
        linear = nn.Linear(sizes[i - 1], sizes[i])
        glorot_(linear)
        layers.append(linear)
        if i < len(sizes) - 1 or relu_last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Dlrm(nn.Module):
    def __init__(self, num_dense, table_rows, dim, bottom, top, init_scale, fused):
        super().__init__()
        if bottom[-1] != dim:
            sys.exit("torch_dlrm_bench: the last bottom layer must equal the embedding dim (dot)")
        self.dim = dim
        self.num_tables = len(table_rows)
        self.bottom = mlp([num_dense] + bottom, relu_last=True)
        n = self.num_tables + 1
        self.register_buffer("li", torch.triu_indices(n, n, offset=1)[0], persistent=False)
        self.register_buffer("lj", torch.triu_indices(n, n, offset=1)[1], persistent=False)
        self.top = mlp([dim + n * (n - 1) // 2] + top, relu_last=False)
        self.fused = fused
        if fused:
            # One table holding every field's rows (TorchRec-style), ids offset per field.
            self.emb = nn.ModuleList([nn.EmbeddingBag(int(sum(table_rows)), dim, mode="sum",
                                                      sparse=True)])
            base = np.concatenate([[0], np.cumsum(table_rows)[:-1]]).astype(np.int64)
            self.register_buffer("base", torch.from_numpy(base), persistent=False)
        else:
            # The reference DLRM's layout (dlrm_s_pytorch.py): one EmbeddingBag per field.
            self.emb = nn.ModuleList(
                [nn.EmbeddingBag(int(r), dim, mode="sum", sparse=True) for r in table_rows])
        for e in self.emb:
            nn.init.uniform_(e.weight, -init_scale, init_scale)

    def forward(self, dense, ids, offsets):
        x0 = self.bottom(dense)
        batch = dense.shape[0]
        if self.fused:
            flat = (ids + self.base).reshape(-1)
            pooled = self.emb[0](flat, offsets).view(batch, self.num_tables, self.dim)
            t = torch.cat([x0.unsqueeze(1), pooled], dim=1)
        else:
            t = torch.stack([x0] + [e(ids[:, f], offsets) for f, e in enumerate(self.emb)], dim=1)
        z = torch.bmm(t, t.transpose(1, 2))  # batch x (T+1) x (T+1)
        inter = torch.cat([x0, z[:, self.li, self.lj]], dim=1)
        return self.top(inter).squeeze(1)


def renumber(cat, known=None):
    """Per field, 64-bit ids -> 0..n-1. With `known` (the training uniques), an unseen id maps to
    an extra row n (a fresh, untrained row: tandem's PS answers an unknown id with its init)."""
    out = np.empty(cat.shape, dtype=np.int64)
    uniques = []
    for f in range(cat.shape[1]):
        col = np.ascontiguousarray(cat[:, f])
        if known is None:
            u, inv = np.unique(col, return_inverse=True)
            uniques.append(u)
            out[:, f] = inv
        else:
            u = known[f]
            pos = np.minimum(np.searchsorted(u, col), len(u) - 1)
            out[:, f] = np.where(u[pos] == col, pos, len(u))
    return out, uniques


def auc(scores, labels):
    """Exact ROC AUC (ties get the average rank)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s), dtype=np.float64)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def median(v):
    return float(np.median(v)) if len(v) else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="training data (tandem binary format)")
    p.add_argument("--eval", default="", help="held-out data for an AUC after training")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=50, help="steps left out of the figure")
    p.add_argument("--log-every", type=int, default=10, help="steps per timing window")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--bottom", default="64,16")
    p.add_argument("--top", default="128,64,1")
    p.add_argument("--tables", choices=["separate", "fused"], default="separate")
    p.add_argument("--sparse-lr", type=float, default=0.3, help="tables.default.lr")
    p.add_argument("--sparse-init-acc", type=float, default=0.1,
                   help="tables.default.adagrad.initial_accumulator")
    p.add_argument("--init-scale", type=float, default=0.01, help="tables.default.init.scale")
    p.add_argument("--dense-lr", type=float, default=0.01, help="train.dense_lr")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bench-name", default="torch_dlrm_samples_per_sec")
    p.add_argument("--omp-wait-default", action="store_true",
                   help="keep libgomp's default (spinning) wait policy; see the top of the file")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    log = lambda msg: print(f"torch_dlrm_bench: {msg}", file=sys.stderr, flush=True)

    t_load = time.perf_counter()
    rec = read_binary(a.data)
    need = a.steps * a.batch
    if need > len(rec):
        sys.exit(f"torch_dlrm_bench: {a.steps} steps x {a.batch} need {need} records, "
                 f"{a.data} has {len(rec)}")
    # One epoch's random order; only the records the steps use are materialised.
    order = np.sort(np.random.default_rng(a.seed).permutation(len(rec))[:need])
    order = np.random.default_rng(a.seed + 1).permutation(order)
    rec = rec[order]  # a copy in memory, in training order
    ids, uniques = renumber(rec["cat"])
    table_rows = [len(u) + 1 for u in uniques]  # + 1: the row of ids the training data lacks
    dense = torch.from_numpy(np.ascontiguousarray(rec["dense"]))
    labels = torch.from_numpy(np.ascontiguousarray(rec["label"]))
    ids_t = torch.from_numpy(ids)
    num_dense, num_tables = dense.shape[1], ids.shape[1]
    log(f"{need} records of {a.data} loaded in {time.perf_counter() - t_load:.1f} s; "
        f"{num_dense} dense, {num_tables} tables, {sum(table_rows)} rows in all "
        f"(largest {max(table_rows)}), {a.tables} tables, {a.threads} threads, "
        f"OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'default')}, "
        f"torch {torch.__version__}")

    model = Dlrm(num_dense, table_rows, a.dim, [int(x) for x in a.bottom.split(",")],
                 [int(x) for x in a.top.split(",")], a.init_scale, a.tables == "fused")
    dense_params = [q for n, q in model.named_parameters() if not n.startswith("emb.")]
    opt_dense = torch.optim.Adam(dense_params, lr=a.dense_lr, betas=(0.9, 0.999), eps=1e-8)
    opt_sparse = torch.optim.Adagrad(list(model.emb.parameters()), lr=a.sparse_lr,
                                     initial_accumulator_value=a.sparse_init_acc)
    loss_fn = nn.BCEWithLogitsLoss()
    per_bag = a.batch * (num_tables if a.tables == "fused" else 1)
    offsets = torch.arange(per_bag, dtype=torch.int64)

    windows = []  # samples/s of each full window after the warm-up
    window_losses = []  # the loss of each window's last step (tandem's step lines carry it too)
    parts = {"forward_s": 0.0, "backward_s": 0.0, "dense_opt_s": 0.0, "sparse_opt_s": 0.0}
    steady_steps = 0
    steady_t0 = None
    window_t0 = time.perf_counter()
    window_steps = 0
    loss = None
    now = time.perf_counter
    for step in range(a.steps):
        if step == a.warmup:
            steady_t0 = now()
            window_t0, window_steps = steady_t0, 0
        lo, hi = step * a.batch, (step + 1) * a.batch
        t0 = now()
        opt_dense.zero_grad(set_to_none=True)
        opt_sparse.zero_grad(set_to_none=True)
        logits = model(dense[lo:hi], ids_t[lo:hi], offsets)
        loss = loss_fn(logits, labels[lo:hi])
        t1 = now()
        loss.backward()
        t2 = now()
        opt_dense.step()
        t3 = now()
        opt_sparse.step()
        t4 = now()
        window_steps += 1
        if step >= a.warmup:
            steady_steps += 1
            for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                parts[k] += v
        if (step + 1) % a.log_every == 0 or step + 1 == a.steps:
            t = now()
            window_losses.append(float(loss.item()))  # on the CPU a plain read
            if step >= a.warmup and window_steps == a.log_every:
                windows.append(window_steps * a.batch / (t - window_t0))
            window_t0, window_steps = t, 0
    steady_s = now() - steady_t0 if steady_t0 is not None else 0.0
    final_loss = float(loss.item())

    eval_auc = None
    if a.eval:
        ev = read_binary(a.eval)
        ev_ids, _ = renumber(ev["cat"], uniques)
        with torch.no_grad():
            scores = torch.cat([
                model(torch.from_numpy(np.ascontiguousarray(ev["dense"][i:i + a.batch])),
                      torch.from_numpy(ev_ids[i:i + a.batch]),
                      torch.arange(min(a.batch, len(ev) - i) * (num_tables if model.fused else 1),
                                   dtype=torch.int64))
                for i in range(0, len(ev), a.batch)]).numpy()
        eval_auc = auc(scores, np.asarray(ev["label"]))

    value = median(windows)
    mean_sps = steady_steps * a.batch / steady_s if steady_s > 0 else 0.0
    if steady_steps:
        log("per steady step: " + ", ".join(f"{k} {v / steady_steps * 1e3:.2f} ms"
                                              for k, v in parts.items()) +
            f"; windows (samples/s): {' '.join(f'{w:.0f}' for w in windows)}; "
            f"loss at steps {a.log_every - 1}, {2 * a.log_every - 1}, ...: "
            f"{' '.join(f'{x:.4f}' for x in window_losses)}" +
            (f"; eval AUC {eval_auc:.4f}" if eval_auc is not None else ""))
    fig = {"bench": a.bench_name, "value": round(value, 1), "unit": "samples/s",
           "better": "higher", "baseline": "none", "baseline_value": 0, "ratio": 0.0,
           "mean_samples_per_sec": round(mean_sps, 1), "windows": len(windows),
           "steps": a.steps, "warmup_steps": a.warmup, "batch": a.batch, "threads": a.threads,
           "tables": a.tables, "table_rows": int(sum(table_rows)), "last_loss": final_loss,
           "auc": eval_auc, "torch": torch.__version__,
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
           "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}
    fig.update({k: v / steady_steps if steady_steps else 0.0 for k, v in parts.items()})
    print(json.dumps(fig), flush=True)


if __name__ == "__main__":
    main()
