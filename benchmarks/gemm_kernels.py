"""Benchmark: one fp32 linear layer in XNNPACK, ONNX Runtime and PyTorch, at 1 and at 2 threads.

`audiodeploy bench --profile` gives where a program's time goes per XNNPACK operator. On an Intel Xeon with
AVX-512 (2 cores) wav2vec2-base's fully connected GEMMs ran at 137 GFLOP/s at 1 s of audio where ONNX Runtime's
MatMuls ran at 181, while the convolutions ran as fast as ONNX Runtime's. This measures the kernels alone: the
linear layers of a base-size encoder (``768 x 768``, ``768 x 3072``, ``3072 x 768``) on the rows of 1 s and
10 s of audio (49 and 499 frames), each lowered alone by ``audiodeploy.lower`` (one XNNPACK fully connected
operator), exported to ONNX, and run in PyTorch, timed round-robin by the same code as ``audiodeploy bench``
(``audiodeploy.bench.timing``); each runtime's median call, each thread count in a process of its own.
``xnnpack-conv1x1`` is the same product as a 1x1 convolution on a ``[1, in, frames, 1]`` image (XNNPACK's
convolution GEMM path, with its layout change), to see whether another XNNPACK operator reaches a better kernel.

    python benchmarks/gemm_kernels.py --name NAME      # benchmarks/results/gemm-kernels-NAME.json, a minute
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import audiodeploy  # noqa: E402
from audiodeploy._files import atomic_write_text  # noqa: E402
from audiodeploy.bench.runtimes import onnxruntime_session_options  # noqa: E402
from audiodeploy.bench.timing import (  # noqa: E402
    Runner,
    machine_info,
    restart_with_passive_openmp_threads,
    set_threads,
    time_interleaved,
)
from audiodeploy.runtime import Program  # noqa: E402

SHAPES = ((768, 768), (768, 3072), (3072, 768))
"""(in, out) features of a base-size speech encoder's linears: attention projections, feed-forward up and down."""
ROWS = (49, 499)
"""Frames of 1 s and 10 s of 16 kHz audio in wav2vec2-style encoders."""


class PointwiseConvolution(torch.nn.Module):
    """``linear`` as a 1x1 convolution of an image ``[1, in, frames, 1]``: the same weights and product."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(linear.in_features, linear.out_features, 1)
        with torch.no_grad():
            self.conv.weight.copy_(linear.weight[:, :, None, None])
            self.conv.bias.copy_(linear.bias)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.conv(image)


def measure(threads: int, runs: int, warmup: int) -> list[dict]:
    import onnxruntime

    set_threads(threads)  # between passes no program is loaded: the threadpool can be resized
    options = onnxruntime_session_options(threads)  # as `audiodeploy bench` runs it: idle threads do not spin
    rows = []
    for features_in, features_out in SHAPES:
        linear = torch.nn.Linear(features_in, features_out).eval()
        for frames in ROWS:
            x = torch.randn(1, frames, features_in)
            program = Program(audiodeploy.lower(linear, (x,)).buffer, trusted=True)
            image = x.transpose(1, 2)[..., None].contiguous()
            conv1x1 = Program(audiodeploy.lower(PointwiseConvolution(linear).eval(), (image,)).buffer, trusted=True)
            exported = io.BytesIO()
            torch.onnx.export(linear, (x,), exported, dynamo=False)
            session = onnxruntime.InferenceSession(exported.getvalue(), options, providers=["CPUExecutionProvider"])
            feed = {session.get_inputs()[0].name: x.numpy()}

            def eager(x: torch.Tensor = x, linear: torch.nn.Module = linear) -> object:
                with torch.no_grad():
                    return linear(x)

            runners = [
                Runner("xnnpack", lambda program=program, x=x: program.run((x,)), runs, warmup),
                Runner("xnnpack-conv1x1", lambda conv1x1=conv1x1, image=image: conv1x1.run((image,)), runs, warmup),
                Runner("onnxruntime", lambda session=session, feed=feed: session.run(None, feed), runs, warmup),
                Runner("torch", eager, runs, warmup),
            ]
            seconds = {name: timing.median for name, timing in time_interleaved(runners).items()}
            gflop = 2 * frames * features_in * features_out / 1e9
            rows.append(
                {
                    "threads": threads,
                    "rows": frames,
                    "in_features": features_in,
                    "out_features": features_out,
                    "gflop": gflop,
                    "median_s": seconds,
                    "gflops": {name: gflop / s for name, s in seconds.items()},
                }
            )
            print(
                f"{threads} thread(s) {frames:4d} x {features_in:4d} -> {features_out:4d}: "
                + ", ".join(f"{name} {gflop / s:5.0f} GFLOP/s" for name, s in seconds.items()),
                flush=True,
            )
    return rows


ROWS_MARK = "gemm-kernels rows: "


def _measured_apart(threads: int, args: argparse.Namespace) -> list[dict]:
    """:func:`measure` at ``threads`` in a fresh process (its progress lines pass through)."""
    command = [sys.executable, __file__, "--name", args.name, "--runs", str(args.runs), "--warmup", str(args.warmup)]
    done = subprocess.run([*command, "--threads", str(threads)], check=True, capture_output=True, text=True)
    rows: list[dict] = []
    for line in done.stdout.splitlines():
        if line.startswith(ROWS_MARK):
            rows = json.loads(line[len(ROWS_MARK) :])
        else:
            print(line, flush=True)
    return rows


def main() -> None:
    restart_with_passive_openmp_threads(sys.argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="names the result file: gemm-kernels-NAME.json")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)  # one count, rows to stdout: see below
    args = parser.parse_args()
    if args.threads:
        rows = measure(args.threads, args.runs, args.warmup)
        print(ROWS_MARK + json.dumps(rows))
        return
    # Each thread count in a process of its own: ExecuTorch's threadpool is resized only before a program is
    # loaded, and in one process the programs of the 1-thread pass left the 2-thread pass's XNNPACK operators at
    # about 130 GFLOP/s where a fresh process measures 190-200 (499 x 768 -> 3072, this Intel Xeon).
    rows = [row for threads in (1, 2) for row in _measured_apart(threads, args)]
    result = {"benchmark": "gemm-kernels", "machine": machine_info(2), "cases": rows}
    path = ROOT / "benchmarks" / "results" / f"gemm-kernels-{args.name}.json"
    atomic_write_text(path, json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
