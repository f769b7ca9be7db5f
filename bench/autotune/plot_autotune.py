#!/usr/bin/env python3
"""plot_autotune: charts of an autotune benchmark result (bench/autotune/autotune_bench.py's JSON).

  ../tfvenv/bin/python bench/autotune/plot_autotune.py /tmp/ringfeed-bench/results/autotune-<time>.json \
      [--out docs/img]

Writes two PNGs (under 200 KB each, for the repository):
  autotune-throughput.png  per scenario, examples/s over time (0.5 s moving average of the
                           examples taken per 100 ms): both autotuned runs, the best fixed
                           setting, the autotuner's start (1 / 1 / 2) and tf.data; the readers
                           the first autotuned run used, as a step line on the right axis
  autotune-grid.png        per scenario, the steady examples/s of every fixed setting (bars,
                           grouped by readers), with the autotuned runs and tf.data as lines
Needs matplotlib (pip install matplotlib, e.g. into ../tfvenv).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TITLES = {"local": "local files (page cache)", "slow2": "slowfs, 2 ms per read", "slow20": "slowfs, 20 ms per read"}
TFDATA = {"tfdata_autotune": "tf.data AUTOTUNE", "tfdata_reads16": "tf.data num_parallel_reads=16",
          "tfdata_article_npc2": "tf.data article, npc=2"}


def smooth(bins, bin_seconds, window=5):
    xs, ys = [], []
    for i in range(window, len(bins) + 1):
        xs.append(i * bin_seconds)
        ys.append(sum(bins[i - window:i]) / (window * bin_seconds))
    return xs, ys


def steady(run):
    return run["metrics"]["steady_examples_per_s"] or 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "img"))
    a = ap.parse_args()
    doc = json.load(open(a.json))
    runs = [r for r in doc["runs"] if "error" not in r]
    scenarios = [s for s in doc["scenarios"] if any(r["scenario"] == s for r in runs)]
    os.makedirs(a.out, exist_ok=True)
    stamp = f"{doc['date']}, {os.path.basename(a.json)}"

    # ---- throughput over time ----
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 3.8), squeeze=False)
    for ax, s in zip(axes[0], scenarios):
        sr = {r["contender"]: r for r in runs if r["scenario"] == s}
        fixed = [r for n, r in sr.items() if n.startswith("fixed_")]
        best = max(fixed, key=steady) if fixed else None
        lines = [(n, sr[n], label, style) for n, label, style in (
            ("autotune", "autotune (run 1)", dict(color="C0", lw=1.8)),
            ("autotune_2", "autotune (run 2)", dict(color="C0", lw=1.2, ls="--")),
            ("fixed_r1_w1_p2", "fixed 1/1/2 (autotune's start)", dict(color="0.6", lw=1)),
        ) if n in sr]
        if best is not None:
            k = best["knobs"]
            lines.insert(2, (best["contender"], best, f"best fixed {k['readers']}/{k['workers']}/{k['prefetch']}",
                             dict(color="C3", lw=1.4)))
        for i, n in enumerate(TFDATA):
            if n in sr:
                lines.append((n, sr[n], TFDATA[n], dict(color=f"C{i + 1 if i < 2 else 4}", lw=1, ls=":")))
        for _, r, label, style in lines:
            xs, ys = smooth(r["timeline"]["examples_per_bin"], r["timeline"]["bin_seconds"])
            ax.plot(xs, [y / 1e3 for y in ys], label=label, **style)
        ax.set_title(TITLES.get(s, s), fontsize=10)
        ax.set_xlabel("seconds from the first batch")
        ax.set_ylabel("examples/s (thousands, 0.5 s average)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        auto = sr.get("autotune")
        if auto is not None:
            pts = [(smp["t"], smp["pipeline"]["readers"]) for smp in auto["timeline"]["samples"]
                   if isinstance(smp.get("pipeline"), dict)]
            if pts:
                ax2 = ax.twinx()
                ax2.step([p[0] for p in pts], [p[1] for p in pts], where="post", color="C0", alpha=0.35, lw=1)
                ax2.set_ylabel("autotune readers (run 1)", color="C0", alpha=0.7, fontsize=8)
                ax2.set_ylim(0, 17)
                ax2.tick_params(axis="y", labelsize=7)
        ax.legend(fontsize=6.5, loc="lower right")
    fig.suptitle(f"ringfeedd autotune vs fixed settings and tf.data ({stamp})", fontsize=9)
    fig.tight_layout()
    path = os.path.join(a.out, "autotune-throughput.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    print(f"{path}: {os.path.getsize(path) // 1024} KiB")

    # ---- the grid ----
    fig, axes = plt.subplots(len(scenarios), 1, figsize=(9, 2.9 * len(scenarios)), squeeze=False)
    for ax, s in zip(axes[:, 0], scenarios):
        sr = {r["contender"]: r for r in runs if r["scenario"] == s}
        fixed = [r for n, r in sr.items() if n.startswith("fixed_")]
        readers = sorted({r["knobs"]["readers"] for r in fixed})
        combos = sorted({(r["knobs"]["workers"], r["knobs"]["prefetch"]) for r in fixed})
        width = 0.8 / max(1, len(combos))
        for j, (w, p) in enumerate(combos):
            xs, ys = [], []
            for i, rd in enumerate(readers):
                r = sr.get(f"fixed_r{rd}_w{w}_p{p}")
                if r is not None:
                    xs.append(i + (j - (len(combos) - 1) / 2) * width)
                    ys.append(steady(r) / 1e3)
            ax.bar(xs, ys, width=width * 0.95, label=f"workers {w}, prefetch {p}", color=f"C{j}", alpha=0.8)
        for n, label, style in (("autotune", "autotune (run 1)", dict(color="k", lw=1.5)),
                                ("autotune_2", "autotune (run 2)", dict(color="k", lw=1, ls="--")),
                                ("tfdata_autotune", "tf.data AUTOTUNE", dict(color="C6", lw=1.2, ls=":")),
                                ("tfdata_reads16", "tf.data num_parallel_reads=16", dict(color="C7", lw=1.2, ls="-."))):
            if n in sr:
                ax.axhline(steady(sr[n]) / 1e3, label=label, **style)
        ax.set_xticks(range(len(readers)))
        ax.set_xticklabels([f"{rd} reader{'s' if rd > 1 else ''}" for rd in readers])
        ax.set_ylabel("steady examples/s (k)")
        ax.set_title(f"{TITLES.get(s, s)}: fixed settings (last {doc['steady']:g} s of {doc['seconds']:g} s)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=6.5, ncol=2, loc="upper left")
    fig.tight_layout()
    path = os.path.join(a.out, "autotune-grid.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    print(f"{path}: {os.path.getsize(path) // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
