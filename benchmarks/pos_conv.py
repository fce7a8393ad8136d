"""Benchmark: wav2vec2-large's positional convolution, lowered four ways.

The module is ``weight_norm(Conv1d(C, C, K, padding=K // 2, groups=G), dim=2)``
with seeded synthetic weights, run on a ``(1, C, L)`` input. In one run this
script measures:

- ``stock``: stock ExecuTorch lowering (``audiodeploy.lower(..., options=LoweringOptions(fold=False))``);
  XNNPACK declines the convolution because its weight is computed, so the
  convolution and the weight-norm computation run on portable kernels;
- ``audiodeploy``: ``audiodeploy.lower(...)`` (``fold=True``, the default), the computed weight
  folded into a constant inside the delegate;
- ``reference``: a fresh module with the same weights whose parametrization was
  removed by hand (``remove_parametrizations(leave_parametrized=True)``) before
  stock lowering; what the fold should match;
- ``eager``: the parametrized module in PyTorch, under ``torch.no_grad()``, with
  the same thread count as the ExecuTorch runtime;
- ``onnxruntime``: ONNX Runtime on the module's ONNX export, as ``audiodeploy bench
  --compare onnxruntime`` runs it (when the ``bench`` extra is installed; ``--no-onnxruntime``
  leaves it out).

For each: delegates, ops outside delegates, median latency after warm-up, max
abs diff vs eager, .pte size and lowering time (export + lower + serialize);
and the ratios stock/audiodeploy, audiodeploy/reference, audiodeploy/eager (and
audiodeploy/onnxruntime). The timed calls are interleaved round-robin by the same
code as ``audiodeploy bench`` (``audiodeploy.bench.timing``). Stock takes
tens of seconds a call at full size, hence its own, smaller run count.

Defaults are wav2vec2-large's (1024 channels, kernel 128, 16 groups, padding 64,
sequence length 499: 10 s of audio, at wav2vec2's 50 frames a second). Run from the repository root::

    python benchmarks/pos_conv.py                       # full size, a few minutes
    python benchmarks/pos_conv.py --channels 64 --kernel 16 --groups 4 --length 50 \\
        --json /tmp/pos_conv_small.json                 # quick check

The result goes to ``benchmarks/results/pos_conv.json`` unless ``--json`` says otherwise.

The module, its labels and its size come from :mod:`audiodeploy.bench.pos_conv`, which ``audiodeploy bench
pos-conv`` runs on a device (the native runner, qemu-aarch64, a phone, a board) with the stock and folded
lowerings only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch.nn.utils import parametrize

import audiodeploy
from audiodeploy._files import atomic_write_text
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.pos_conv import LABELS as LOWERING_LABELS
from audiodeploy.bench.pos_conv import build, build_model
from audiodeploy.bench.request import PosConvShape, require_onnxruntime
from audiodeploy.bench.results import ms, ops, size
from audiodeploy.bench.runtimes import OnnxRuntime
from audiodeploy.bench.timing import Runner, machine_info, paired_ratio, set_threads, time_interleaved
from audiodeploy.runtime import Program

RESULTS = Path(__file__).resolve().parent / "results"

LABELS = {
    **LOWERING_LABELS,
    "reference": "parametrization removed by hand",
    "eager": "eager PyTorch",
    "onnxruntime": "ONNX Runtime",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="wav2vec2-large positional convolution (weight_norm Conv1d): stock vs audiodeploy "
        "lowering vs parametrization removed by hand vs eager.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--channels", type=int, default=1024, help="input = output channels")
    p.add_argument("--kernel", type=int, default=128, help="kernel size; padding is kernel // 2")
    p.add_argument("--groups", type=int, default=16, help="convolution groups")
    p.add_argument("--length", type=int, default=499, help="sequence length (frames)")
    p.add_argument("--runs", type=int, default=20, help="timed runs of audiodeploy, reference and eager")
    p.add_argument("--warmup", type=int, default=2, help="warm-up runs of audiodeploy, reference and eager")
    p.add_argument("--stock-runs", type=int, default=2, help="timed runs of stock lowering (slow)")
    p.add_argument("--stock-warmup", type=int, default=1, help="warm-up runs of stock lowering")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for eager and ExecuTorch (default: ExecuTorch's threadpool size)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights and input")
    p.add_argument("--no-onnxruntime", action="store_true", help="leave ONNX Runtime out")
    p.add_argument("--json", type=Path, default=RESULTS / "pos_conv.json", help="where to write the result")
    args = p.parse_args(argv)
    if args.channels % args.groups:
        p.error(f"--channels {args.channels} is not divisible by --groups {args.groups}")
    if min(args.runs, args.stock_runs) < 1 or min(args.warmup, args.stock_warmup) < 0:
        p.error("run counts must be >= 1 and warm-up counts >= 0")
    return args


def build_reference(model: torch.nn.Module, channels: int, kernel: int, groups: int) -> torch.nn.Module:
    """A fresh module with ``model``'s weights and its parametrization removed by hand.

    Never a deepcopy: a copied parametrized module shares its generated class with
    the original, and removing the parametrization from the copy breaks the original.
    """
    fresh = build_model(channels, kernel, groups, seed=0)
    fresh.load_state_dict(model.state_dict())
    parametrize.remove_parametrizations(fresh, "weight", leave_parametrized=True)
    with torch.no_grad():
        assert not parametrize.is_parametrized(fresh)
        torch.testing.assert_close(fresh.weight, model.weight, rtol=0, atol=0)
    return fresh.eval()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    threads = set_threads(args.threads)
    machine = machine_info(threads)  # before the run: its date is when the run started
    shape = PosConvShape(args.channels, args.kernel, args.groups, args.length)
    padding = shape.padding
    module_desc = shape.describe()
    log(f"{module_desc}, input (1, {args.channels}, {args.length}), {threads} thread(s)")

    model, x = build(shape, args.seed)  # the module and input `audiodeploy bench pos-conv` measures
    reference_model = build_reference(model, args.channels, args.kernel, args.groups)
    with torch.no_grad():
        expected = model(x)

    lowerings = {
        "stock": (model, False),
        "audiodeploy": (model, True),
        "reference": (reference_model, False),
    }
    results: dict[str, dict] = {}
    programs: dict[str, Program] = {}
    for name, (module, fold) in lowerings.items():
        log(f"lowering {name} ...")
        start = time.perf_counter()
        lowered = audiodeploy.lower(module, (x,), options=audiodeploy.LoweringOptions(fold=fold))
        lowering_s = time.perf_counter() - start
        method = lowered.report.methods["forward"]
        programs[name] = Program(lowered.buffer, origin=name)
        log(
            f"lowered {name} in {lowering_s:.1f} s: {method.delegates} delegate(s), "
            f"outside: {dict(method.ops_outside_delegates) or 'none'}; checking output ..."
        )
        (out,) = programs[name].run((x,))
        if out.shape != expected.shape:
            raise RuntimeError(f"{name}: output shape {tuple(out.shape)}, eager gives {tuple(expected.shape)}")
        results[name] = {
            "label": LABELS[name],
            "delegates": method.delegates,
            "ops_outside_delegates": dict(method.ops_outside_delegates),
            "max_abs_diff": (out - expected).abs().max().item(),
            "pte_bytes": len(lowered.buffer),
            "lowering_s": lowering_s,
            "report": lowered.report.to_dict(),
        }
    # Eager PyTorch is the baseline of the diffs; its one untimed call above is not a warm-up.
    results["eager"] = {"label": LABELS["eager"]}
    onnx = None
    if not args.no_onnxruntime:
        try:
            require_onnxruntime()
        except BenchError as error:
            log(f"leaving ONNX Runtime out: {error}")
        else:
            log("exporting to ONNX ...")
            onnx = OnnxRuntime(model, (x,), None, threads)
            onnx.load()
            out = onnx.run((x,))
            results["onnxruntime"] = {
                "label": onnx.info.label,
                "max_abs_diff": (out - expected).abs().max().item(),
                "onnx_bytes": onnx.info.program_bytes,
                "export_s": onnx.info.prepare_s,
            }

    def eager_call() -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    def et_call(program: Program):
        return lambda: program.run((x,))

    runners = [
        Runner("stock", et_call(programs["stock"]), args.stock_runs, args.stock_warmup),
        Runner("audiodeploy", et_call(programs["audiodeploy"]), args.runs, args.warmup),
        Runner("reference", et_call(programs["reference"]), args.runs, args.warmup),
        Runner("eager", eager_call, args.runs, args.warmup),
    ]
    if onnx is not None:
        runners.append(Runner("onnxruntime", lambda: onnx.run((x,)), args.runs, args.warmup))
    log("timing, round-robin ...")
    timings = time_interleaved(runners, progress=log)
    for name, timing in timings.items():
        results[name]["latency"] = timing.to_dict()

    pairs = [("stock", "audiodeploy"), ("audiodeploy", "reference"), ("audiodeploy", "eager")]
    if onnx is not None:
        pairs.append(("audiodeploy", "onnxruntime"))
    ratios = {f"{a}/{b}": timings[a].median / timings[b].median for a, b in pairs}
    paired_ratios = {f"{a}/{b}": paired_ratio(timings[a], timings[b]) for a, b in pairs}
    diff_ad, diff_ref = results["audiodeploy"]["max_abs_diff"], results["reference"]["max_abs_diff"]
    checks = {
        "stock/audiodeploy >= 100": ratios["stock/audiodeploy"] >= 100,
        "audiodeploy within 10% of reference": abs(ratios["audiodeploy/reference"] - 1) <= 0.10,
        # Eager is the baseline (its diff is 0): compare with the hand-removed reference's diff.
        "audiodeploy max abs diff within 10x of reference's": diff_ad <= 10 * max(diff_ref, 1e-7),
    }
    record = {
        "benchmark": "pos_conv",
        "module": module_desc,
        "config": {
            "channels": args.channels,
            "kernel": args.kernel,
            "groups": args.groups,
            "padding": padding,
            "length": args.length,
            "input_shape": list(x.shape),
            "output_shape": list(expected.shape),
            "dtype": "float32",
            "seed": args.seed,
            "gflop": shape.gflop(),
        },
        "machine": machine,
        "results": results,
        "ratios": ratios,
        "ratios_note": "ratios: of the median latencies; paired_ratios: median of the per-round ratios",
        "paired_ratios": paired_ratios,
        "checks": checks,
    }
    print(format_table(record))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.json, json.dumps(record, indent=2) + "\n")
    log(f"wrote {args.json}")
    return record


def format_table(record: dict) -> str:
    results, machine, cfg = record["results"], record["machine"], record["config"]
    lines = [
        f"{record['module']}, input {tuple(cfg['input_shape'])} fp32, {cfg['gflop']:.3g} GFLOP",
        f"{machine['processor']}, {machine['cpu_count']} CPUs, {machine['threads']} thread(s); "
        f"torch {machine['torch']}, executorch {machine['executorch']}; {machine['date']}",
        "",
        "| lowering | delegates | ops outside delegates | median latency | runs "
        "| max abs diff vs eager | .pte size | lowering time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        latency = r["latency"]
        if name == "eager":
            cells = [r["label"], "–", "–", ms(latency["median_s"]), _runs(latency), "–", "–", "–"]
        elif name == "onnxruntime":
            cells = [
                r["label"],
                "–",
                "–",
                ms(latency["median_s"]),
                _runs(latency),
                f"{r['max_abs_diff']:.1e}",
                size(r["onnx_bytes"]),
                f"{r['export_s']:.1f} s",
            ]
        else:
            cells = [
                r["label"],
                str(r["delegates"]),
                ops(r["ops_outside_delegates"]),
                ms(latency["median_s"]),
                _runs(latency),
                f"{r['max_abs_diff']:.1e}",
                size(r["pte_bytes"]),
                f"{r['lowering_s']:.1f} s",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("ratios of median latencies (median of per-round ratios):")
    for key, ratio in record["ratios"].items():
        lines.append(f"  {key}: {_ratio(ratio)} ({_ratio(record['paired_ratios'][key])})")
    lines.append("")
    lines.extend(f"[{'PASS' if ok else 'FAIL'}] {k}" for k, ok in record["checks"].items())
    return "\n".join(lines)


def _ratio(r: float) -> str:
    return f"{r:,.0f}x" if r >= 100 else f"{r:.3f}x"


def _runs(latency: dict) -> str:
    return f"{latency['runs']} (+{latency['warmup']} warm-up)"


if __name__ == "__main__":
    main()
