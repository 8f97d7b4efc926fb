"""PyTorch twins of tandem's dense networks (issue 19): DLRM, DCN-v2, DeepFM, Wide & Deep, MMoE.

Each twin computes what worker/model/<type>.cc computes, layer for layer (the same Linear shapes,
so the same parameter count, which make_model checks against tandem's), from the pooled
embeddings on:
  - bottom MLP over the dense features, ReLU after every layer, the last included;
  - an MLP's ReLU follows every layer but the last unless the model says otherwise (top MLP and
    towers: none after the logits);
  - dlrm: dot interaction [x_bottom, <x_i, x_j> for i < j] (row-major strict upper triangle) or
    concat, then the top MLP; a feature whose width differs from the bottom's last is projected
    by a Linear (dot only);
  - dcn_v2: x0 = [bottom(dense), pooled fields]; x_{l+1} = x0 * (W x_l + b) + x_l (low rank:
    U (V x_l + c) + b); stacked: top MLP over x_L; parallel: head([x_L, deep(x0)]), deep = the
    top MLP without its last layer, ReLU after each;
  - deepfm: fields [bottom(dense), pooled (projected by a Linear where width != k)], logit_t =
    top([fields])_t + 0.5 * sum_c((sum_i v_ic)^2 - sum_i v_ic^2) + sum_f wide_f,t;
  - wide_deep: logit_t = top(x0)_t + sum_f wide_f,t;
  - mmoe: experts (expert_mlp, ReLU after each layer) over x0, per label a softmax gate Linear
    over x0 and a tower (top_mlp with its last size replaced by 1) over the gated mixture.
Weights Glorot-uniform, biases 0 (tandem draws its Glorot numbers from Philox, so the values
differ; the distribution is the same). The loss is tandem's: per label t, loss_weight_t *
sum_i BCE-with-logits / batch, summed over the labels.

The description a twin is built from is one line of `models_bench --describe` (tandem's own
config loader: the defaults, the feature widths and the wide features as the trainer has them).
Used by bench/torch_models_bench.py (the dense step's speed) and bench/torch_models_train.py
(training to an eval AUC).
"""

import torch
import torch.nn.functional as F
from torch import nn


def linear(n_in, n_out):
    lin = nn.Linear(n_in, n_out)
    nn.init.xavier_uniform_(lin.weight)
    nn.init.zeros_(lin.bias)
    return lin


class Mlp(nn.Module):
    """Linear layers of `sizes` after `n_in`, ReLU after each but the last unless relu_last."""

    def __init__(self, n_in, sizes, relu_last):
        super().__init__()
        self.layers = nn.ModuleList()
        for size in sizes:
            self.layers.append(linear(n_in, size))
            n_in = size
        self.relu_last = relu_last
        self.out = n_in

    def forward(self, x):
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last or self.relu_last:
                x = F.relu(x)
        return x


class Net(nn.Module):
    """Common inputs: dense (batch x num_dense) and pooled (list: batch x dims[f] per feature,
    the wide features last). forward returns the logits, batch x num_labels."""

    def __init__(self, d):
        super().__init__()
        self.num_wide = d["num_wide"]
        self.num_fields = len(d["dims"]) - self.num_wide
        self.num_labels = d["num_labels"]
        self.bottom = Mlp(d["num_dense"], d["bottom_mlp"], relu_last=True)

    def x0(self, dense, pooled):
        return torch.cat([self.bottom(dense)] + list(pooled[:self.num_fields]), dim=1)

    def x0_width(self, d):
        return d["bottom_mlp"][-1] + sum(d["dims"][:self.num_fields])

    def wide(self, pooled):
        """The first-order term: the wide features' bags summed (batch x num_labels)."""
        w = pooled[self.num_fields]
        for p in pooled[self.num_fields + 1:]:
            w = w + p
        return w


class Dlrm(Net):
    def __init__(self, d):
        super().__init__(d)
        k = d["bottom_mlp"][-1]
        self.dot = d["interaction"] == "dot"
        dims = d["dims"]
        if self.dot:
            n = len(dims) + 1
            iu = torch.triu_indices(n, n, offset=1)
            self.register_buffer("li", iu[0], persistent=False)
            self.register_buffer("lj", iu[1], persistent=False)
            self.proj = nn.ModuleDict({str(f): Mlp(w, [k], relu_last=False)
                                       for f, w in enumerate(dims) if w != k})
            width = k + n * (n - 1) // 2
        else:
            self.proj = nn.ModuleDict()
            width = k + sum(dims)
        self.top = Mlp(width, d["top_mlp"], relu_last=False)

    def forward(self, dense, pooled):
        b = self.bottom(dense)
        if not self.dot:
            return self.top(torch.cat([b] + list(pooled), dim=1))
        vs = [self.proj[str(f)](p) if str(f) in self.proj else p for f, p in enumerate(pooled)]
        t = torch.stack([b] + vs, dim=1)
        z = torch.bmm(t, t.transpose(1, 2))
        return self.top(torch.cat([b, z[:, self.li, self.lj]], dim=1))


class DcnV2(Net):
    def __init__(self, d):
        super().__init__(d)
        w = self.x0_width(d)
        r = d["dcn_low_rank"]
        self.cross = nn.ModuleList()
        for _ in range(d["dcn_cross_layers"]):
            self.cross.append(linear(w, w) if r == 0 else nn.Sequential(linear(w, r), linear(r, w)))
        self.parallel = d["dcn_structure"] == "parallel"
        if self.parallel:
            self.top = Mlp(w, d["top_mlp"][:-1], relu_last=True)
            self.head = linear(w + self.top.out, self.num_labels)
        else:
            self.top = Mlp(w, d["top_mlp"], relu_last=False)

    def forward(self, dense, pooled):
        x0 = self.x0(dense, pooled)
        x = x0
        for c in self.cross:
            x = x0 * c(x) + x
        if not self.parallel:
            return self.top(x)
        return self.head(torch.cat([x, self.top(x0)], dim=1))


class DeepFm(Net):
    def __init__(self, d):
        super().__init__(d)
        self.k = k = d["bottom_mlp"][-1]
        dims = d["dims"][:self.num_fields]
        self.top = Mlp((self.num_fields + 1) * k, d["top_mlp"], relu_last=False)
        self.proj = nn.ModuleDict({str(f): Mlp(w, [k], relu_last=False)
                                   for f, w in enumerate(dims) if w != k})

    def forward(self, dense, pooled):
        vs = [self.bottom(dense)] + [self.proj[str(f)](p) if str(f) in self.proj else p
                                     for f, p in enumerate(pooled[:self.num_fields])]
        x = torch.stack(vs, dim=1)  # batch x (F+1) x k
        s = x.sum(dim=1)
        fm = 0.5 * (s * s - (x * x).sum(dim=1)).sum(dim=1, keepdim=True)
        return self.top(x.reshape(x.shape[0], -1)) + fm + self.wide(pooled)


class WideDeep(Net):
    def __init__(self, d):
        super().__init__(d)
        self.top = Mlp(self.x0_width(d), d["top_mlp"], relu_last=False)

    def forward(self, dense, pooled):
        return self.top(self.x0(dense, pooled)) + self.wide(pooled)


class Mmoe(Net):
    def __init__(self, d):
        super().__init__(d)
        w = self.x0_width(d)
        e = d["mmoe_num_experts"]
        # Parameter order as tandem's flat layout: experts, gates, towers.
        self.experts = nn.ModuleList(
            [Mlp(w, d["mmoe_expert_mlp"], relu_last=True) for _ in range(e)])
        self.gates = nn.ModuleList([linear(w, e) for _ in range(self.num_labels)])
        tower = list(d["top_mlp"][:-1]) + [1]
        self.towers = nn.ModuleList(
            [Mlp(d["mmoe_expert_mlp"][-1], tower, relu_last=False) for _ in range(self.num_labels)])

    def forward(self, dense, pooled):
        x0 = self.x0(dense, pooled)
        stacked = torch.stack([ex(x0) for ex in self.experts], dim=1)  # batch x E x H
        logits = []
        for gate, tower in zip(self.gates, self.towers):
            g = torch.softmax(gate(x0), dim=1)
            mix = torch.bmm(g.unsqueeze(1), stacked).squeeze(1)  # batch x H
            logits.append(tower(mix))
        return torch.cat(logits, dim=1)


MODELS = {"dlrm": Dlrm, "dcn_v2": DcnV2, "deepfm": DeepFm, "wide_deep": WideDeep, "mmoe": Mmoe}


def make_model(d):
    """The twin of one `models_bench --describe` line; checks its parameter count."""
    net = MODELS[d["model"]](d)
    n = sum(p.numel() for p in net.parameters())
    if n != d["num_params"]:
        raise ValueError(f"{d['model']}: the twin has {n} parameters, tandem {d['num_params']}")
    return net


def loss_fn(d, batch):
    """tandem's loss: sum over labels of weight_t * sum_i BCE(logit_it, label_it) / batch."""
    weights = d["loss_weights"] or [1.0] * d["num_labels"]
    w = torch.tensor(weights, dtype=torch.float32)

    def loss(logits, labels):
        bce = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
        return (bce.sum(dim=0) * w).sum() / batch
    return loss
