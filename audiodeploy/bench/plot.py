"""``--plot PATH``: a PNG of the latency of each runtime, and per input length when there are several.

One length: a horizontal bar per runtime at its median, a whisker from min to p90, and the
ratio to the baseline written beside it. Several lengths: median latency against audio
duration, one line per runtime, the min-p90 band shaded. A log scale as soon as the
runtimes differ by more than 20x (stock lowering is often 100x slower than the rest).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from audiodeploy._files import atomic_write_bytes
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.request import BENCH_EXTRA_HINT
from audiodeploy.bench.results import POS_CONV, where_measured

COLORS = {
    "audiodeploy": "#1b7837",
    "pte": "#1b7837",
    "stock": "#b2182b",
    "eager": "#2166ac",
    "onnxruntime": "#e08214",
    "audiodeploy-fp16": "#1b7837",
    "audiodeploy-int8": "#5aae61",
    "onnxruntime-int8": "#fdb863",
}


def require_matplotlib() -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise BenchError(f"--plot needs matplotlib, which is not installed: {BENCH_EXTRA_HINT}")


def render_png(record: dict[str, Any]) -> bytes:
    """The chart as PNG bytes (nothing written)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = record["cases"]
    names = list(record["runtimes"])
    if len(cases) == 1:
        fig = _bars(plt, record, cases[0], names)
    else:
        fig = _lines(plt, record, cases, names)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def write_png(path: Path, png: bytes) -> Path:
    return atomic_write_bytes(path, png)


def _title(record: dict[str, Any]) -> str:
    target, machine, transport = record["target"], record["machine"], record["transport"]
    if target["kind"] == "recipe":
        what = f"{target['recipe']} {target['variant']}"
    elif target["kind"] == POS_CONV:
        what = target["module"]
    else:
        what = Path(target["path"]).name
    where = (
        f"{machine.get('processor') or machine.get('machine')}, {machine['threads']} thread(s)"
        if transport["kind"] == "local"
        else where_measured(record)
    )
    return f"{what}: latency per runtime\n{where}; torch {machine['torch']}, executorch {machine['executorch']}"


def _label(ms: float) -> str:
    if ms >= 1000:
        return f"{ms / 1000:,.2f} s"
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _spread(values: list[float]) -> bool:
    return max(values) / max(min(values), 1e-12) > 20


def _bars(plt, record: dict[str, Any], case: dict[str, Any], names: list[str]):
    figures = [case["runtimes"][n]["latency"] for n in names]
    medians = [f["median_s"] * 1e3 for f in figures]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.7 * len(names)))
    positions = list(range(len(names)))[::-1]
    ax.barh(positions, medians, color=[COLORS.get(n, "#777777") for n in names], height=0.6)
    for y, f in zip(positions, figures):
        ax.plot([f["min_s"] * 1e3, f["p90_s"] * 1e3], [y, y], color="black", linewidth=1)
    ax.set_yticks(
        positions, [record["runtimes"][n]["label"] if len(record["runtimes"][n]["label"]) < 40 else n for n in names]
    )
    if _spread(medians):
        ax.set_xscale("log")
    ax.set_xlim(right=max(f["p90_s"] * 1e3 for f in figures) * (8 if _spread(medians) else 1.45))
    baseline = record["baseline"]
    for y, name, median, f in zip(positions, names, medians, figures):
        text = _label(median)
        key = f"{baseline}/{name}"
        if key in case["ratios"]:
            ratio = case["ratios"][key]
            text += f"   {baseline}/{name} = {ratio:.3g}"
        ax.text(max(median, f["p90_s"] * 1e3), y, "  " + text, va="center", fontsize=9)
    audio = f"{case['audio_seconds']:.2f} s of audio, " if case["audio_seconds"] else ""
    ax.set_xlabel(f"median latency, ms ({audio}input {tuple(case['input_shape'])}); whisker: min to p90")
    ax.set_title(_title(record), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def _lines(plt, record: dict[str, Any], cases: list[dict[str, Any]], names: list[str]):
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [c["audio_seconds"] if c["audio_seconds"] else c["input_length"] for c in cases]
    everything = []
    for name in names:
        latency = [c["runtimes"][name]["latency"] for c in cases]
        medians = [f["median_s"] * 1e3 for f in latency]
        everything += medians
        color = COLORS.get(name, "#777777")
        ax.plot(xs, medians, marker="o", color=color, label=name)
        ax.fill_between(
            xs, [f["min_s"] * 1e3 for f in latency], [f["p90_s"] * 1e3 for f in latency], color=color, alpha=0.15
        )
        for x, m in zip(xs, medians):
            ax.annotate(_label(m), (x, m), textcoords="offset points", xytext=(4, 4), fontsize=8, color=color)
    if _spread(everything):
        ax.set_yscale("log")
    ax.set_xlabel("audio duration, s" if cases[0]["audio_seconds"] else "input length")
    ax.set_ylabel("median latency, ms (band: min to p90)")
    ax.set_title(_title(record), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    return fig
