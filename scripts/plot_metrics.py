#!/usr/bin/python3
# Debian's interpreter on purpose: python3-matplotlib installs for it, not for a pyenv or venv
# python3 that may come first on PATH.
"""Turn a tandem metrics.jsonl (DESIGN §12) into a PNG: training loss and held-out AUC over steps.

Usage:
  scripts/plot_metrics.py OUTPUT/metrics.jsonl [-o plot.png] [--faults drill.json] [--title T]

Step lines carry "loss", eval lines "auc"; the "final": true line's AUC is shown in the title.
Replayed steps ("replay": true) are drawn as separate markers. --faults takes `tandem drill`'s
report (OUTPUT/drill.json: each fault that fired, at its step) or a JSON list of objects with a
"step" and a "label" key, drawn as vertical lines.
A torn last line (a job killed mid-write) is skipped with a warning.

Exit status: 0 written, 1 bad input, 2 matplotlib missing (Debian: apt-get install
python3-matplotlib).
"""

import argparse
import json
import math
import os
import sys


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Plot loss and eval AUC over steps from a tandem metrics.jsonl.",
        epilog="Needs matplotlib from Debian: apt-get install python3-matplotlib.",
    )
    parser.add_argument("metrics", help="path to metrics.jsonl")
    parser.add_argument("-o", "--output", help="PNG to write (default: METRICS with .png)")
    parser.add_argument(
        "--faults",
        help='JSON list of {"step": N, "label": "..."} objects marked as vertical lines',
    )
    parser.add_argument("--title", help="figure title (default: the metrics file's path)")
    return parser.parse_args(argv)


def finite(value):
    # The writer stores a non-finite loss as null; keep such steps out of the line.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_metrics(path):
    """Returns (steps, replays, evals, final): steps/replays/evals are lists of (step, value)."""
    steps, replays, evals, final = [], [], [], None
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                print(f"{path}:{number}: skipping a line that is not JSON", file=sys.stderr)
                continue
            if not isinstance(record, dict):
                continue
            if record.get("final") is True:
                final = record
            elif "loss" in record and "step" in record:
                if finite(record["loss"]):
                    target = replays if record.get("replay") is True else steps
                    target.append((record["step"], record["loss"]))
            elif "auc" in record and "step" in record and finite(record["auc"]):
                evals.append((record["step"], record["auc"]))
    return steps, replays, evals, final


def read_faults(path):
    with open(path, encoding="utf-8") as f:
        faults = json.load(f)
    if isinstance(faults, dict) and isinstance(faults.get("faults"), list):
        # `tandem drill`'s report (output.dir/drill.json): each fault that fired, at the step
        # it fired, labelled with its spec.
        faults = [{"step": f["fired_at_step"], "label": f.get("fault", "")}
                  for f in faults["faults"]
                  if isinstance(f, dict) and f.get("fired") is True and finite(f.get("fired_at_step"))]
    if not isinstance(faults, list):
        raise ValueError(f"{path}: expected tandem drill's drill.json or a JSON list of objects")
    for i, fault in enumerate(faults):
        if not isinstance(fault, dict) or not finite(fault.get("step")):
            raise ValueError(f"{path}: entry {i} needs a numeric \"step\"")
    return [(fault["step"], str(fault.get("label", ""))) for fault in faults]


def mark_faults(axes, faults):
    for step, label in faults:
        for ax in axes:
            ax.axvline(step, color="tab:red", linestyle="--", linewidth=1, alpha=0.7)
        if label:
            top = axes[0]
            top.annotate(label, xy=(step, 1), xycoords=("data", "axes fraction"),
                         rotation=90, va="top", ha="right", fontsize=8, color="tab:red")


def plot(metrics, faults, output, title):
    import matplotlib

    matplotlib.use("Agg")  # no display needed: CI and ssh sessions
    import matplotlib.pyplot as plt

    steps, replays, evals, final = metrics
    fig, (loss_ax, auc_ax) = plt.subplots(2, 1, sharex=True, figsize=(10, 7))
    if steps:
        loss_ax.plot(*zip(*sorted(steps)), linewidth=1, label="loss")
    if replays:
        loss_ax.scatter(*zip(*replays), s=12, color="tab:orange", label="replayed step", zorder=3)
    loss_ax.set_ylabel("loss (global batch mean)")
    loss_ax.legend(loc="upper right")
    if evals:
        auc_ax.plot(*zip(*sorted(evals)), marker="o", markersize=3, color="tab:green",
                    label="eval AUC")
        auc_ax.legend(loc="lower right")
    auc_ax.set_ylabel("held-out AUC")
    auc_ax.set_xlabel("step")
    mark_faults((loss_ax, auc_ax), faults)
    if final is not None and finite(final.get("auc")):
        title += f"  (final AUC {final['auc']:.4f})"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)


def main(argv):
    args = parse_args(argv)
    try:
        import matplotlib  # noqa: F401  (checked before any work, so the message comes first)
    except ImportError:
        print(f"plot_metrics.py needs matplotlib, which {sys.executable} cannot import: "
              "apt-get install python3-matplotlib (for /usr/bin/python3)", file=sys.stderr)
        return 2
    try:
        metrics = read_metrics(args.metrics)
        faults = read_faults(args.faults) if args.faults else []
    except (OSError, ValueError) as error:  # JSONDecodeError is a ValueError
        print(f"plot_metrics.py: {error}", file=sys.stderr)
        return 1
    if not metrics[0] and not metrics[1] and not metrics[2]:
        print(f"plot_metrics.py: {args.metrics} has no step or eval lines", file=sys.stderr)
        return 1
    output = args.output or os.path.splitext(args.metrics)[0] + ".png"
    plot(metrics, faults, output, args.title or args.metrics)
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
