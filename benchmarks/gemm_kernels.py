"""Benchmark: one fp32 linear layer in XNNPACK, ONNX Runtime and PyTorch, at 1 and at 2 threads.

`audiodeploy bench --profile` gives where a program's time goes per XNNPACK operator. On an Intel Xeon with
AVX-512 (2 cores) wav2vec2-base's fully connected GEMMs ran at 137 GFLOP/s at 1 s of audio where ONNX Runtime's
MatMuls ran at 181, while the convolutions ran as fast as ONNX Runtime's. This measures the kernels alone: the
linear layers of a base-size encoder (``768 x 768``, ``768 x 3072``, ``3072 x 768``) on the rows of 1 s and
10 s of audio (49 and 499 frames), each lowered alone by ``audiodeploy.lower`` (one XNNPACK fully connected
operator), exported to ONNX, and run in PyTorch. Calls are interleaved round-robin, medians taken per runtime.

    python benchmarks/gemm_kernels.py --name NAME      # benchmarks/results/gemm-kernels-NAME.json, a minute
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import audiodeploy  # noqa: E402
from audiodeploy._files import atomic_write_text  # noqa: E402
from audiodeploy.bench.timing import machine_info, restart_with_passive_openmp_threads  # noqa: E402
from audiodeploy.runtime import Program  # noqa: E402
from audiodeploy.runtime.program import set_threadpool_size  # noqa: E402

SHAPES = ((768, 768), (768, 3072), (3072, 768))
"""(in, out) features of a base-size speech encoder's linears: attention projections, feed-forward up and down."""
ROWS = (49, 499)
"""Frames of 1 s and 10 s of 16 kHz audio in wav2vec2-style encoders."""


def _median_seconds(runners: dict[str, Callable[[], object]], calls: int, rounds: int) -> dict[str, float]:
    """Each runner's fastest of ``rounds`` medians of ``calls`` calls, runners taken in turn in every round."""
    medians: dict[str, list[float]] = {name: [] for name in runners}
    for run in runners.values():
        run()  # warm-up: XNNPACK packs, ONNX Runtime plans
    for _ in range(rounds):
        for name, run in runners.items():
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            medians[name].append(statistics.median(times))
    return {name: min(values) for name, values in medians.items()}


def measure(threads: int, calls: int, rounds: int) -> list[dict]:
    import onnxruntime

    set_threadpool_size(threads)
    torch.set_num_threads(threads)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    rows = []
    for features_in, features_out in SHAPES:
        linear = torch.nn.Linear(features_in, features_out).eval()
        for frames in ROWS:
            x = torch.randn(1, frames, features_in)
            program = Program(audiodeploy.lower(linear, (x,)).buffer, trusted=True)
            exported = io.BytesIO()
            torch.onnx.export(linear, (x,), exported, dynamo=False)
            session = onnxruntime.InferenceSession(exported.getvalue(), options, providers=["CPUExecutionProvider"])
            feed = {session.get_inputs()[0].name: x.numpy()}

            def eager(x: torch.Tensor = x, linear: torch.nn.Module = linear) -> object:
                with torch.no_grad():
                    return linear(x)

            seconds = _median_seconds(
                {
                    "xnnpack": lambda program=program, x=x: program.run((x,)),
                    "onnxruntime": lambda session=session, feed=feed: session.run(None, feed),
                    "torch": eager,
                },
                calls,
                rounds,
            )
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


def main() -> None:
    restart_with_passive_openmp_threads(sys.argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="names the result file: gemm-kernels-NAME.json")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = [row for threads in (1, 2) for row in measure(threads, args.calls, args.rounds)]
    result = {"benchmark": "gemm-kernels", "machine": machine_info(2), "cases": rows}
    path = ROOT / "benchmarks" / "results" / f"gemm-kernels-{args.name}.json"
    atomic_write_text(path, json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
