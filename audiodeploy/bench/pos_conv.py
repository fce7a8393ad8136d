"""``audiodeploy bench pos-conv``: the weight-normed positional convolution of wav2vec2, lowered the stock
ExecuTorch way and by audiodeploy, both run on the device asked for.

The module is ``weight_norm(Conv1d(C, C, K, padding=K // 2, groups=G), dim=2)`` with seeded synthetic weights,
the positional convolution of wav2vec2, HuBERT and WavLM (without the GELU and the dropped last frame that follow
it there), on a ``(1, C, T)`` input. XNNPACK 1.5.1 delegates a convolution only when its weight is a parameter:
stock lowering leaves this one, and the weight-norm computation that feeds it, on the portable kernels;
audiodeploy folds the computed weight into a constant and the convolution goes into the delegate.

The defaults are wav2vec2-base's (768 channels, kernel 128, 16 groups) at 1 s of audio (49 frames).
``benchmarks/pos_conv.py`` measures the same module on this machine only, beside eager PyTorch, ONNX Runtime
and the parametrization removed by hand.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch
from torch.nn.utils import parametrizations

from audiodeploy.bench.request import PosConvShape
from audiodeploy.bench.results import POS_CONV as TARGET
from audiodeploy.bench.results import aligned, heading, ms, ops, ratio_words

LABELS = {"stock": "stock ExecuTorch (fold=False)", "audiodeploy": "audiodeploy (fold=True)"}
"""The two lowerings as the table (and benchmarks/pos_conv.py) names them."""


def build_model(channels: int, kernel: int, groups: int, seed: int) -> torch.nn.Module:
    """The positional convolution as wav2vec2 builds it, with seeded weights, in eval mode."""
    torch.manual_seed(seed)
    conv = torch.nn.Conv1d(channels, channels, kernel, padding=kernel // 2, groups=groups)
    return parametrizations.weight_norm(conv, name="weight", dim=2).eval()


def build(shape: PosConvShape, seed: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """The module and its seeded ``(1, C, T)`` input."""
    model = build_model(shape.channels, shape.kernel, shape.groups, seed)
    x = torch.randn(1, shape.channels, shape.length, generator=torch.Generator().manual_seed(seed + 1))
    return model, x


def target_record(shape: PosConvShape, model: torch.nn.Module) -> dict[str, Any]:
    """The record's ``target``: every key a recipe's has (None where it has no meaning), and the module."""
    return {
        "kind": TARGET,
        "recipe": None,
        "variant": None,
        "source": None,
        "weights": "synthetic (seeded)",
        "parameters": sum(p.numel() for p in model.parameters()),
        "path": None,
        "sample_rate": None,
        "input_kind": "frames",
        "length_range_seconds": None,
        "module": shape.describe(),
        "shape": {**asdict(shape), "padding": shape.padding},
        "gflop": shape.gflop(),
    }


def default_name(shape: PosConvShape) -> str:
    return f"{TARGET}-c{shape.channels}-k{shape.kernel}-g{shape.groups}-t{shape.length}"


def format_table(record: dict[str, Any]) -> str:
    """The pos-conv table: per lowering, its delegates, the ops left on portable kernels, the median latency and
    the max abs diff vs eager PyTorch on this machine; then how much faster audiodeploy's lowering ran."""
    target = record["target"]
    (case,) = record["cases"]
    lines = [
        heading(f"{target['module']} on {tuple(case['input_shape'])} fp32, {target['gflop']:.3g} GFLOP", record),
        "",
    ]
    rows = [["lowering", "delegates", "ops on portable kernels", "median latency", "runs", "max abs diff vs eager"]]
    for name, info in record["runtimes"].items():
        figures = case["runtimes"][name]
        diff = figures["max_abs_diff_vs_eager"]
        rows.append([
            LABELS.get(name, name),
            str(info["delegates"]),
            ops(info["ops_outside_delegates"]),
            ms(figures["latency"]["median_s"]),
            f"{figures['latency']['runs']}+{figures['latency']['warmup']}",
            "–" if diff is None else f"{diff:.1e}",
        ])  # fmt: skip
    lines += aligned(rows)
    baseline = record["baseline"]
    lines += ["", *(f"{key}: {ratio_words(value, baseline)}" for key, value in case["ratios"].items())]
    # Every runtime of one device shares its notes (emulation, thread pool, memory): say each once.
    notes = dict.fromkeys(note for figures in case["runtimes"].values() for note in figures["notes"])
    lines += [f"note: {note}" for note in notes]
    lines += ["runs: timed + warm-up."]
    return "\n".join(lines)
