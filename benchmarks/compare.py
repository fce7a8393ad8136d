"""Run `audiodeploy bench --compare stock,eager,onnxruntime` on the published models, one after another,
write benchmarks/results/<name>.json (and a .png chart beside it), and regenerate models.md.

    python benchmarks/compare.py                    # everything, sequentially: about two hours on 2 cores
    python benchmarks/compare.py wav2vec2-base speecht5-hifigan-v1-1s
    python benchmarks/compare.py --list

Stock ExecuTorch lowering runs fewer times than the rest: a stock call of wav2vec2-large on
10 s of audio takes minutes (its positional convolution runs on portable kernels). The
positional convolution on its own is measured by pos_conv.py (stock, audiodeploy, weights
folded by hand, eager and ONNX Runtime), run here too.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

COMPARE = ["--compare", "stock,eager,onnxruntime"]
BOTH_LENGTHS = ["--seconds", "1", "--seconds", "10"]
FEW_STOCK_RUNS = ["--stock-runs", "1", "--stock-warmup", "0"]
INT8_COMPARE = ["--compare", "audiodeploy-int8,onnxruntime,onnxruntime-int8,eager"]

# name -> arguments of `audiodeploy bench` (without --json/--plot) or of pos_conv.py.
CASES: dict[str, list[str]] = {
    "wav2vec2-base": [
        "wav2vec2",
        "--variant",
        "base",
        *BOTH_LENGTHS,
        *COMPARE,
        "--runs",
        "10",
        "--warmup",
        "2",
        "--stock-runs",
        "3",
        "--stock-warmup",
        "1",
    ],
    "hubert-base": [
        "hubert",
        "--variant",
        "base",
        *BOTH_LENGTHS,
        *COMPARE,
        "--runs",
        "10",
        "--warmup",
        "2",
        *FEW_STOCK_RUNS,
    ],
    "wavlm-base-plus": [
        "wavlm",
        "--variant",
        "base-plus",
        *BOTH_LENGTHS,
        *COMPARE,
        "--runs",
        "10",
        "--warmup",
        "2",
        *FEW_STOCK_RUNS,
    ],
    # Stock lowering of WavLM large takes 17 s a call at 1 s (its relative-position bias and
    # gates on portable kernels) and minutes at 10 s: it is measured at 1 s in wavlm-large-1s.
    "wavlm-large": [
        "wavlm",
        "--variant",
        "large",
        *BOTH_LENGTHS,
        "--compare",
        "eager,onnxruntime",
        "--runs",
        "5",
        "--warmup",
        "1",
    ],
    "wav2vec2-large": [
        "wav2vec2",
        "--variant",
        "large",
        *BOTH_LENGTHS,
        *COMPARE,
        "--runs",
        "5",
        "--warmup",
        "1",
        *FEW_STOCK_RUNS,
    ],
    "hubert-large": [
        "hubert",
        "--variant",
        "large",
        *BOTH_LENGTHS,
        *COMPARE,
        "--runs",
        "5",
        "--warmup",
        "1",
        *FEW_STOCK_RUNS,
    ],
    "speecht5-hifigan-v1-1s": [
        "speecht5-hifigan",
        "--variant",
        "v1",
        "--seconds",
        "1",
        *COMPARE,
        "--runs",
        "10",
        "--warmup",
        "2",
        "--stock-runs",
        "2",
        "--stock-warmup",
        "1",
    ],
    "pos-conv": ["pos_conv.py"],
}

# The remaining published variants, for models.md: against stock lowering and eager PyTorch at 1 s.
STOCK_AND_EAGER = ["--compare", "stock,eager", "--runs", "5", "--warmup", "1", *FEW_STOCK_RUNS]
for _name, _recipe, _variant in (
    ("speecht5-hifigan-spectral-norm-1s", "speecht5-hifigan", "spectral-norm"),
    ("wav2vec2-large-lv60-1s", "wav2vec2", "large-lv60"),
    ("wavlm-large-1s", "wavlm", "large"),
):
    CASES[_name] = [_recipe, "--variant", _variant, "--seconds", "1", *STOCK_AND_EAGER]

# Every vocoder at both lengths, against eager and ONNX Runtime; one of each HiFi-GAN kind and Vocos also in int8-static
# (calibrated on generated signals), to say which precision its default export should be.
VOCODER_COMPARE = ["--compare", "eager,onnxruntime", "--runs", "5", "--warmup", "1"]
BIG_VOCODER_COMPARE = ["--compare", "eager,onnxruntime", "--runs", "3", "--warmup", "1"]
VOCODER_INT8_COMPARE = ["--compare", "eager,onnxruntime,audiodeploy-int8", "--runs", "5", "--warmup", "1"]
for _recipe, _variant, _compare in (
    ("hifigan", "v1", VOCODER_INT8_COMPARE), ("hifigan", "v2", VOCODER_COMPARE), ("hifigan", "v3", VOCODER_COMPARE),
    ("speecht5-hifigan", "v1", VOCODER_INT8_COMPARE), ("univnet", "c32", VOCODER_COMPARE),
    # BigVGAN v2 is 112-122 M parameters: three timed runs a runtime.
    ("bigvgan", "v2-22khz-80band-256x", BIG_VOCODER_COMPARE), ("bigvgan", "v2-24khz-100band-256x", BIG_VOCODER_COMPARE),
    ("bigvgan", "v2-44khz-128band-512x", BIG_VOCODER_COMPARE),
    ("vocos", "mel-24khz", VOCODER_INT8_COMPARE),
):  # fmt: skip
    CASES[f"{_recipe}-{_variant}"] = [_recipe, "--variant", _variant, *BOTH_LENGTHS, *_compare]

# int8 beside fp32: audiodeploy's int8-dynamic (the recipe's default fp32 layers) and ONNX Runtime's
# quantize_dynamic of the same ONNX export, with their fidelity against eager; every speech encoder, both lengths.
for _recipe, _variant in (
    ("wav2vec2", "base"), ("hubert", "base"), ("wavlm", "base-plus"),
    ("wav2vec2", "large"), ("hubert", "large"), ("wavlm", "large"),
):  # fmt: skip
    _runs = ["--runs", "3", "--warmup", "1"] if _variant == "large" else ["--runs", "5", "--warmup", "1"]
    CASES[f"{_recipe}-{_variant}-int8"] = [_recipe, "--variant", _variant, *BOTH_LENGTHS, *INT8_COMPARE, *_runs]


def command(name: str) -> list[str]:
    """The command, run from the repository root (so that the results record it with relative paths)."""
    args = CASES[name]
    if args[0] == "pos_conv.py":
        return ["python", "benchmarks/pos_conv.py", "--json", "benchmarks/results/pos_conv.json"]
    return [
        "audiodeploy",
        "bench",
        *args,
        "--name",
        name,
        "--json",
        f"benchmarks/results/{name}.json",
        "--plot",
        f"benchmarks/results/{name}.png",
    ]


def _executable(argv: list[str]) -> list[str]:
    """This interpreter for ``python``, and ``python -m audiodeploy`` for ``audiodeploy`` (same environment)."""
    if argv[0] == "python":
        return [sys.executable, *argv[1:]]
    return [sys.executable, "-m", "audiodeploy", *argv[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"which to run (default: all): {', '.join(CASES)}")
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    parser.add_argument(
        "--replot", action="store_true", help="only redraw results/<name>.png from results/<name>.json, and models.md"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in CASES]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}; choose among {', '.join(CASES)}")
    names = args.names or list(CASES)
    if args.list:
        for name in names:
            print(f"{name}: {shlex.join(command(name))}")
        return 0
    if args.replot:
        from audiodeploy.bench.plot import render_png, write_png
        from audiodeploy.bench.results import read_json

        for name in names:
            if CASES[name][0] != "pos_conv.py" and (ROOT / f"benchmarks/results/{name}.json").is_file():
                record = read_json(ROOT / f"benchmarks/results/{name}.json")
                write_png(ROOT / f"benchmarks/results/{name}.png", render_png(record))
                print(f"redrew benchmarks/results/{name}.png")
        subprocess.run([sys.executable, str(HERE / "generate_models_md.py")], check=True)
        return 0
    failed = []
    for name in names:
        start = time.monotonic()
        print(f"== {name}: {shlex.join(command(name))}", flush=True)
        # As `audiodeploy bench` does for itself: PyTorch's OpenMP threads sleep instead of spinning when idle.
        env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
        if subprocess.run(_executable(command(name)), cwd=ROOT, env=env).returncode != 0:
            failed.append(name)
        print(f"== {name}: {'FAILED' if name in failed else 'done'} in {time.monotonic() - start:.0f} s", flush=True)
    subprocess.run([sys.executable, str(HERE / "generate_models_md.py")], check=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
