#!/usr/bin/env python3
"""Draws the figures of `troupe bench engine --json FILE` as PNGs.

    .cache/test-venv/bin/python bench/plot.py FILE.json [--out DIR]

writes into DIR (default: the JSON file's folder):
  engine_batch_scaling.png   aggregate decode tokens/s against batch size, one line per
                             configuration, llama.cpp's llama-batched-bench line beside them
  engine_step_phases.png     the decode step phase by phase at each batch size (stacked bars),
                             per configuration: ms per step above, ms per token below

matplotlib comes with the test venv (scripts/test-venv.sh). Exits 1 with a message naming the
problem when the file is not such a document.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

SCHEMA = "troupe.bench.engine"
SCHEMA_VERSION = 1


class PlotError(Exception):
    """The input is not a document this script can draw; the message names the problem."""


def load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise PlotError(f"cannot read {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise PlotError(f"{path} is not JSON: {e}") from e
    check(doc)
    return doc


def check(doc) -> None:
    if not isinstance(doc, dict):
        raise PlotError("the document is not a JSON object")
    if doc.get("schema") != SCHEMA:
        raise PlotError(f"'schema' is {doc.get('schema')!r}, not {SCHEMA!r} (write it with `troupe bench engine --json`)")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise PlotError(f"'schema_version' is {doc.get('schema_version')!r}; this script reads {SCHEMA_VERSION}")
    confs = doc.get("configurations")
    if not isinstance(confs, list) or not confs:
        raise PlotError("'configurations' is missing or empty: the run measured nothing")
    for i, c in enumerate(confs):
        if not isinstance(c.get("name"), str):
            raise PlotError(f"configurations[{i}].name is missing")
        if not isinstance(c.get("batched"), list):
            raise PlotError(f"configurations[{i}].batched is missing")
        for j, b in enumerate(c["batched"]):
            if not isinstance(b.get("batch"), int) or not isinstance(b.get("median"), (int, float)):
                raise PlotError(f"configurations[{i}].batched[{j}] needs an integer 'batch' and a number 'median'")


def scaling_series(doc: dict) -> dict[str, list[tuple[int, float]]]:
    """Aggregate decode tokens/s by batch size: one series per configuration, and llama.cpp's
    (under "llama.cpp") when the run has its figures."""
    out = {}
    for c in doc["configurations"]:
        out[c["name"]] = sorted((b["batch"], float(b["median"])) for b in c["batched"])
    llama = (doc.get("llama_cpp") or {}).get("batched") or []
    if llama:
        out["llama.cpp"] = sorted((b["batch"], float(b["tokens_per_s"])) for b in llama)
    return out


def phase_table(doc: dict) -> dict[str, list[tuple[int, list[tuple[str, float]]]]]:
    """Per configuration, the profiled batch sizes with their step's (label, ms) parts: each
    phase, then the time outside the forward pass. Batch sizes without a profile are left out."""
    out = {}
    for c in doc["configurations"]:
        rows = []
        for b in c["batched"]:
            step = b.get("step")
            if not step:
                continue
            parts = [(p["label"], float(p["ms"])) for p in step["phases"]]
            parts.append(("sampling, batch setup (outside forward)", float(step["outside_forward_ms"])))
            rows.append((b["batch"], parts))
        if rows:
            out[c["name"]] = sorted(rows, key=lambda r: r[0])
    return out


def title_of(doc: dict) -> str:
    m = doc.get("machine") or {}
    loads = m.get("load_average_start") or []
    load = f", load {loads[0]:.2f}" if loads and loads[0] is not None else ""
    model = (doc.get("model") or {}).get("id", "?")
    return f"{model}, {doc.get('threads', '?')} threads, {m.get('cpu', 'unknown CPU')}{load}"


def plot_scaling(doc: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    series = scaling_series(doc)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for name, pts in series.items():
        xs, ys = zip(*pts)
        style = dict(color="black", linestyle="--", marker="s") if name == "llama.cpp" else dict(marker="o")
        ax.plot(xs, ys, label=name, **style)
    ax.set_xscale("log", base=2)
    batches = sorted({b for pts in series.values() for b, _ in pts})
    ax.set_xticks(batches)
    ax.set_xticklabels([str(b) for b in batches])
    ax.set_xlabel("batch size (sequences decoding together)")
    ax.set_ylabel("aggregate decode tokens/s")
    opts = doc.get("options") or {}
    ax.set_title(f"Aggregate decode ({opts.get('batch_prompt', '?')} prompt + {opts.get('batch_gen', '?')} "
                 f"generated tokens a sequence)\n{title_of(doc)}", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_phases(doc: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    table = phase_table(doc)
    if not table:
        raise PlotError("no configuration has a decode-step profile (configurations[].batched[].step)")
    names = list(table)
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names) + 1.5, 7), dpi=100, squeeze=False)
    labels = [label for label, _ in next(iter(table.values()))[0][1]]
    colors = plt.get_cmap("tab10").colors
    for col, name in enumerate(names):
        rows = table[name]
        xs = [str(b) for b, _ in rows]
        for r, per_token in ((0, False), (1, True)):
            ax = axes[r][col]
            bottom = [0.0] * len(rows)
            for k, label in enumerate(labels):
                hs = [parts[k][1] / (b if per_token else 1) for b, parts in rows]
                ax.bar(xs, hs, bottom=bottom, color=colors[k % len(colors)], label=label)
                bottom = [a + h for a, h in zip(bottom, hs)]
            ax.set_xlabel("batch size")
            ax.set_ylabel("ms per token" if per_token else "ms per decode step")
            if r == 0:
                ax.set_title(name, fontsize=9)
            ax.grid(True, axis="y", alpha=0.3)
    handles, leg = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, leg, loc="lower center", ncol=2, fontsize=7)
    fig.suptitle(f"Decode step by phase\n{title_of(doc)}", fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="the file `troupe bench engine --json FILE` wrote")
    ap.add_argument("--out", help="folder for the PNGs (default: the JSON file's folder)")
    args = ap.parse_args(argv)
    try:
        doc = load(args.json)
        out = args.out or os.path.dirname(os.path.abspath(args.json))
        os.makedirs(out, exist_ok=True)
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        written = []
        for name, draw in (("engine_batch_scaling.png", plot_scaling), ("engine_step_phases.png", plot_phases)):
            path = os.path.join(out, name)
            draw(doc, path)
            written.append(path)
    except PlotError as e:
        print(f"bench/plot.py: {e}", file=sys.stderr)
        return 1
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
