#!/usr/bin/python3
"""Trains the PyTorch twin of a tandem model (bench/torch_models.py) to an eval AUC (issue 19:
"a PyTorch implementation of the same architecture, initialisation scheme and optimizers trained
on the same data and steps ends within 0.005 AUC of tandem's"). The baseline of
bench/models_auc_vs_torch.sh.

The model and its settings come from one `models_bench --describe --config YAML [--set ...]`
line (tandem's own config loader), the data from `tandem datagen --config YAML --format binary`
files (version 1, or version 2 single-hot for several labels), read with numpy:
  - one embedding table per field (ids renumbered to 0..n-1 per field; an eval id the training
    data lacks gets an extra row that is never trained, as tandem's PS answers an unknown id with
    a fresh row), rows uniform(-init.scale, init.scale), sparse Adagrad with tables.default.lr
    and adagrad.initial_accumulator (torch's eps 1e-10 where tandem has none);
  - DeepFM and Wide & Deep: per field a wide table of num_labels columns, zero-initialised,
    trained with FTRL-proximal exactly as common/embedding/sparse_optimizer.cc's ApplyFtrl
    (per element: n' = n + g^2, z += g - (sqrt(n') - sqrt(n)) / alpha * w, w = 0 when |z| <= l1
    else -(z - sign(z) l1) / ((beta + sqrt(n')) / alpha + l2); untouched where n' == 0),
    by hand on the coalesced sparse gradient (other model.wide.optimizer values: Adagrad as above);
  - dense weights Glorot-uniform, biases 0, Adam (train.dense_lr, 0.9/0.999, eps 1e-8); tandem's
    loss (torch_models.loss_fn) over train.batch_size (one worker: the global batch).
Records are visited in one random order (seeded), train.steps batches of train.batch_size, so a
file of steps x batch rows is seen once, as by tandem. The eval AUC is exact (ties averaged),
one per label, from the trained model over the whole eval file.

Usage: torch_models_train.py --describe LINE_FILE --train TRAIN.bin --eval EVAL.bin
         [--threads 1] [--steps N] [--batch B]   (default: the describe line's train.*)
Prints one JSON line: {"bench": "torch_<model>_eval_auc", "auc": [per label], ...}.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_dlrm_bench import auc, renumber  # noqa: E402
from torch_models import loss_fn, make_model  # noqa: E402

HEADER = 64


def read_binary(path):
    """labels (n x L), dense (n x D), cat (n x C, uint64) of a single-hot binary file."""
    with open(path, "rb") as f:
        head = f.read(HEADER)
    if head[:8] != b"TNDMDATA":
        sys.exit(f"torch_models_train: {path}: not a tandem binary data file")
    version, num_dense, num_cat = (int(x) for x in np.frombuffer(head, "<u4", 3, 8))
    if version == 1:
        dtype = np.dtype([("label", "<f4"), ("weight", "<f4"), ("dense", "<f4", (num_dense,)),
                          ("cat", "<u8", (num_cat,))])
        count = int(np.frombuffer(head, "<u8", 1, 24)[0])
        rec = np.fromfile(path, dtype=dtype, count=count, offset=HEADER)
        return rec["label"][:, None].copy(), rec["dense"].copy(), rec["cat"].copy()
    if version != 2:
        sys.exit(f"torch_models_train: {path}: unsupported version {version}")
    num_labels = int(np.frombuffer(head, "<u4", 1, 20)[0])
    count = int(np.frombuffer(head, "<u8", 1, 24)[0])
    flags = int(np.frombuffer(head, "<u4", 1, 32)[0])
    records_offset, index_offset = (int(x) for x in np.frombuffer(head, "<u8", 2, 40))
    if flags & 1:
        sys.exit(f"torch_models_train: {path}: weighted ids are not supported")
    # Single-hot: every record has the same length, so the records are one packed array.
    dtype = np.dtype([("label", "<f4", (num_labels,)), ("weight", "<f4"),
                      ("dense", "<f4", (num_dense,)), ("count", "<u4", (num_cat,)),
                      ("cat", "<u8", (num_cat,))])
    index = np.fromfile(path, dtype="<u8", count=count + 1, offset=index_offset)
    if not np.all(np.diff(index) == dtype.itemsize):
        sys.exit(f"torch_models_train: {path}: not single-hot (records of other lengths)")
    rec = np.fromfile(path, dtype=dtype, count=count, offset=records_offset + int(index[0]))
    if not np.all(rec["count"] == 1):
        sys.exit(f"torch_models_train: {path}: a feature with other than one id")
    return rec["label"].copy(), rec["dense"].copy(), rec["cat"].copy()


class Ftrl:
    """tandem's ApplyFtrl on the rows of a sparse gradient (common/embedding/sparse_optimizer.cc)."""

    def __init__(self, weight, alpha, beta, l1, l2):
        self.w, self.alpha, self.beta, self.l1, self.l2 = weight, alpha, beta, l1, l2
        self.z = torch.zeros_like(weight)
        self.n = torch.zeros_like(weight)

    @torch.no_grad()
    def step(self):
        g = self.w.grad.coalesce()
        rows, g = g.indices()[0], g.values()
        w, z, n = self.w.data[rows], self.z[rows], self.n[rows]
        n_new = n + g * g
        s = (n_new.sqrt() - n.sqrt()) / self.alpha
        z_new = z + (g - s * w)
        w_new = -(z_new - torch.sign(z_new) * self.l1) / (
            (self.beta + n_new.sqrt()) / self.alpha + self.l2)
        w_new = torch.where(z_new.abs() <= self.l1, torch.zeros_like(w_new), w_new)
        keep = n_new == 0
        self.w.data[rows] = torch.where(keep, w, w_new)
        self.z[rows] = torch.where(keep, z, z_new)
        self.n[rows] = torch.where(keep, n, n_new)
        self.w.grad = None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--describe", required=True, help="a file with one models_bench --describe line")
    p.add_argument("--train", required=True)
    p.add_argument("--eval", required=True)
    p.add_argument("--steps", type=int, default=0, help="default: the config's train.steps")
    p.add_argument("--batch", type=int, default=0, help="default: the config's train.batch_size")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    with open(a.describe) as f:
        d = json.loads(next(line for line in f if line.strip()))
    steps = a.steps or d["steps"]
    batch = a.batch or d["batch_size"]
    torch.set_num_threads(a.threads)
    torch.manual_seed(d["seed"])
    log = lambda msg: print(f"torch_models_train: {msg}", file=sys.stderr, flush=True)
    if d["table_optimizer"] != "adagrad" or d["table_init_dist"] != "uniform":
        sys.exit("torch_models_train: only tables.default.optimizer adagrad with uniform init")
    if d["dense_optimizer"] != "adam":
        sys.exit("torch_models_train: only train.dense_optimizer adam")

    t0 = time.perf_counter()
    labels, dense, cat = read_binary(a.train)
    need = steps * batch
    if need > len(labels):
        sys.exit(f"torch_models_train: {steps} x {batch} need {need} records, {a.train} has "
                 f"{len(labels)}")
    order = np.random.default_rng(d["seed"]).permutation(len(labels))[:need]
    labels, dense, cat = labels[order], dense[order], cat[order]
    ids, uniques = renumber(cat)
    fields = ids.shape[1]
    if labels.shape[1] != d["num_labels"] or dense.shape[1] != d["num_dense"]:
        sys.exit("torch_models_train: the data's shape is not the model's")
    rows = [len(u) + 1 for u in uniques]  # + 1: ids only the eval data has
    dims = d["dims"]
    emb = [nn.Embedding(rows[f], dims[f], sparse=True) for f in range(fields)]
    for e in emb:
        nn.init.uniform_(e.weight, -d["table_init_scale"], d["table_init_scale"])
    wide = []
    if d["num_wide"]:
        wide = [nn.Embedding(rows[f], d["num_labels"], sparse=True) for f in range(fields)]
        for e in wide:
            nn.init.zeros_(e.weight)
    net = make_model(d)
    opt_dense = torch.optim.Adam(net.parameters(), lr=d["dense_lr"], betas=(0.9, 0.999), eps=1e-8)
    adagrad = [e.weight for e in emb]
    ftrl = []
    if d["wide_optimizer"] == "ftrl":
        ftrl = [Ftrl(e.weight, d["ftrl_alpha"], d["ftrl_beta"], d["ftrl_l1"], d["ftrl_l2"])
                for e in wide]
    else:
        adagrad += [e.weight for e in wide]
    opt_sparse = torch.optim.Adagrad(adagrad, lr=d["table_lr"],
                                     initial_accumulator_value=d["adagrad_initial_accumulator"])
    loss = loss_fn(d, batch)
    dense_t = torch.from_numpy(dense)
    labels_t = torch.from_numpy(labels)
    ids_t = torch.from_numpy(ids)
    log(f"{need} records loaded in {time.perf_counter() - t0:.1f} s; {d['model']}, "
        f"{sum(rows)} rows in {fields} tables, {steps} steps x {batch}")

    def forward(dense_b, ids_b):
        pooled = [e(ids_b[:, f]) for f, e in enumerate(emb)]
        pooled += [e(ids_b[:, f]) for f, e in enumerate(wide)]
        return net(dense_b, pooled)

    t0 = time.perf_counter()
    losses = []
    for step in range(steps):
        lo, hi = step * batch, (step + 1) * batch
        opt_dense.zero_grad(set_to_none=True)
        opt_sparse.zero_grad(set_to_none=True)
        value = loss(forward(dense_t[lo:hi], ids_t[lo:hi]), labels_t[lo:hi])
        value.backward()
        opt_dense.step()
        opt_sparse.step()
        for f in ftrl:
            f.step()
        if (step + 1) % max(1, steps // 10) == 0:
            losses.append(round(float(value), 5))
    train_s = time.perf_counter() - t0

    ev_labels, ev_dense, ev_cat = read_binary(a.eval)
    ev_ids, _ = renumber(ev_cat, uniques)
    with torch.no_grad():
        scores = torch.cat([
            forward(torch.from_numpy(ev_dense[i:i + 4096]), torch.from_numpy(ev_ids[i:i + 4096]))
            for i in range(0, len(ev_labels), 4096)]).numpy()
    aucs = [auc(scores[:, t], ev_labels[:, t]) for t in range(d["num_labels"])]
    log(f"trained in {train_s:.1f} s; losses {losses}; eval AUC {aucs}")
    print(json.dumps({"bench": f"torch_{d['model']}_eval_auc", "model": d["model"], "auc": aucs,
                      "steps": steps, "batch": batch, "train_s": round(train_s, 2),
                      "losses": losses, "eval_rows": len(ev_labels), "torch": torch.__version__}),
          flush=True)


if __name__ == "__main__":
    main()
