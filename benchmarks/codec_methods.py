"""A codec's two methods timed: audiodeploy's program against eager PyTorch and ONNX Runtime, interleaved, at 1 s
and 10 s.

`audiodeploy bench CODEC --method encode|decode` lowers one method alone; this lowers the recipe's two-method
program as `audiodeploy export` does and times each method beside its eager module and that module's ONNX export
(``torch.onnx.export(dynamo=True)`` at the same dynamic length, run as `bench`'s onnxruntime runs it; where that
fails, the TorchScript exporter at each length) on the same input (the decode input: the codes eager gives for that
audio), alternating the three, median of `--runs` after a warm-up. It records the delegates per method, the codes
that differ from eager's, the decoded waveform's largest difference, and the machine.

    python benchmarks/codec_methods.py dac --variant 16khz
    python benchmarks/codec_methods.py mimi --variant 8-codebooks --min-seconds 2.5 --seconds 2.5 --seconds 10
    python benchmarks/codec_methods.py encodec --variant 48khz-6kbps --seconds 1   # one of its own 1 s chunks
    python benchmarks/codec_methods.py encodec --variant 48khz-6kbps --window-seconds 1   # 10 s in its 1 s chunks
    python benchmarks/codec_methods.py encodec --variant 24khz-6kbps --window-seconds 1   # 10 s in 1 s windows

A codec whose program takes one length (EnCodec's LSTM is unrolled at it) is built at `--window-seconds`, and a
longer input runs through `audiodeploy.runtime` in the overlapping windows `audiodeploy run` cuts, against eager and
ONNX Runtime on the whole input at once: the model's own forward, where the program's methods carry the LSTM's
state from window to window (those reproduce its codes; windows that start afresh need not: the record counts the
codes that differ). A codec that runs on its own chunks (EnCodec at 48 kHz) runs a longer input chunk by chunk,
`--window-seconds` being its chunk's length, against transformers' own encode and decode over all the chunks of
the audio padded as its feature extractor pads it.

Writes benchmarks/results/<recipe>-<variant>-methods.json (`--name NAME`: NAME-methods.json, e.g. to keep another
machine's record beside it). Take ratios on an idle machine.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import audiodeploy
from audiodeploy import recipes
from audiodeploy._files import atomic_write_text
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.runtimes import OnnxExport, OnnxRuntime, first_output
from audiodeploy.bench.timing import machine_info, restart_with_passive_openmp_threads, set_threads
from audiodeploy.program.codes import ChunkedCodes
from audiodeploy.recipes.spec import LengthRange, fresh_state
from audiodeploy.runtime.model import ChunkedCodec, Codec
from audiodeploy.runtime.program import Program

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe")
    parser.add_argument("--variant")
    parser.add_argument("--seconds", type=float, action="append", help="repeat; default 1 and 10")
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--name", help="names the result file: NAME-methods.json; default: RECIPE-VARIANT")
    parser.add_argument(
        "--window-seconds",
        type=float,
        help="build the program at this one length and run longer inputs in its windows, as `audiodeploy run` does",
    )
    args = parser.parse_args()
    seconds = sorted(args.seconds or (1.0, 10.0))
    restart_with_passive_openmp_threads(sys.argv)
    threads = set_threads(args.threads)
    recipe = recipes.get(args.recipe)
    if args.window_seconds is not None:
        if seconds[0] < args.window_seconds:
            raise SystemExit(f"--seconds {seconds[0]:g} is shorter than --window-seconds {args.window_seconds:g}")
        length_range = LengthRange.fixed(args.window_seconds)
    elif seconds[0] < args.min_seconds:
        raise SystemExit(f"--seconds {seconds[0]:g} is below --min-seconds {args.min_seconds:g}: the program's range")
    else:
        length_range = LengthRange(args.min_seconds, max(seconds))
    built = recipe.build(variant=args.variant, length_range=length_range)
    if built.decoder is None:
        raise SystemExit(f"{args.recipe} is not a codec: time it with `audiodeploy bench`")
    chunked = built.decoder.chunks is not None
    start = time.perf_counter()
    lowered = audiodeploy.lower({name: audiodeploy.Method(*method) for name, method in built.methods.items()})
    record: dict = {
        "benchmark": "codec-methods",
        "recipe": built.recipe,
        "variant": built.variant,
        "weights": built.weights_provenance,
        "machine": machine_info(threads),
        "lowering_s": round(time.perf_counter() - start, 1),
        "program_bytes": len(lowered.buffer),
        "window_seconds": args.window_seconds,
        "methods": {
            name: {"delegates": m.delegates, "ops_outside_delegates": dict(m.ops_outside_delegates)}
            for name, m in lowered.report.methods.items()
        },
        "cases": [],
    }
    program = Program(lowered.buffer, origin=f"{built.recipe} {built.variant}", trusted=True)
    runtime_codec: Codec | ChunkedCodec | None = None
    if args.window_seconds is not None:
        runtime_codec = (ChunkedCodec if chunked else Codec)(program, built.describe())
    at_each_length = args.window_seconds is not None or built.carried is not None
    onnx = _OnnxSessions(built, threads, at_each_length=at_each_length)
    for length_seconds in seconds:
        windowed = runtime_codec is not None and length_seconds > args.window_seconds
        # The longest length is the range's end, rounded down to whole frames (44.1 kHz DAC: 9.996 s for 10 s).
        length = built.input.length_for_seconds(length_seconds)
        waveform = built.input.random_inputs(length if windowed else min(length, built.input.max_length), seed=1)
        whole_input = windowed or built.carried is not None
        encode_reference = _reference(built.module, built.long_run, whole_input)
        decode_reference = _reference(built.decoder.module, built.decoder.long_run, whole_input)
        with torch.no_grad():
            encoded = encode_reference(*waveform)
        # The codes, and a chunked codec's scale beside them (EnCodec at 48 kHz).
        codes = encoded if isinstance(encoded, tuple) else (encoded,)
        methods = (
            ("encode", encode_reference, waveform, (*waveform, *fresh_state(built.carried))),
            ("decode", decode_reference, codes, built.decoder.inputs_for(encoded)),
        )
        for method, module, inputs, program_inputs in methods:
            if isinstance(runtime_codec, ChunkedCodec) and windowed:
                ours = _in_chunks(runtime_codec, method, inputs, length)
            elif isinstance(runtime_codec, Codec) and windowed:
                ours = _in_windows(runtime_codec, method, inputs)
            else:
                ours = _whole(program, method, program_inputs)
            case = _timed(ours, module, onnx.session(method, module, inputs), inputs, args.runs)
            record["cases"].append({"seconds": length_seconds, "method": method, "windowed": windowed, **case})
            versus = (
                f"ONNX Runtime {case['onnxruntime_ms']:.1f} ms ({case['ratio']:.3f}x eager's, "
                f"{case['onnxruntime_ratio']:.3f}x ONNX Runtime's)"
                if "onnxruntime_ms" in case
                else f"no ONNX Runtime ({case['ratio']:.3f}x eager's)"
            )
            print(
                f"{method} at {length_seconds:g} s: audiodeploy {case['audiodeploy_ms']:.1f} ms, eager "
                f"{case['eager_ms']:.1f} ms, {versus}; {case['difference']}",
                flush=True,
            )
    record["onnx_export"] = onnx.how
    record["onnxruntime"] = onnx.label
    path = RESULTS / f"{args.name or f'{built.recipe}-{built.variant}'}-methods.json"
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


class _OnnxSessions:
    """ONNX Runtime on each method's ONNX export: torch.onnx's dynamo exporter once at a dynamic length; where it
    fails, its TorchScript exporter at each length (which can only help ONNX Runtime); where both fail, none (the
    reasons kept in `how`)."""

    def __init__(self, built: recipes.BuiltModel, threads: int, *, at_each_length: bool) -> None:
        self.threads, self.label = threads, None
        self.dynamic: dict[str, OnnxRuntime] | None = None
        self.failures: list[str] = []
        if at_each_length:
            # A program of one window: the export at its length would refuse the longer inputs.
            self.how = "torch.onnx.export(dynamo=False) at each length (the program takes one window)"
            return
        try:
            self.dynamic = {name: self._loaded(*method, None) for name, method in built.methods.items()}
            self.how = "torch.onnx.export(dynamo=True), once, at a dynamic length"
        except BenchError as error:
            self.failures.append(f"dynamo: {_reason(str(error))}")
            self.how = "torch.onnx.export(dynamo=False) at each length (the dynamo export fails)"

    def _loaded(
        self, module: torch.nn.Module, inputs: tuple, dynamic_shapes: Any, exported: OnnxExport | None
    ) -> OnnxRuntime:
        session = OnnxRuntime(module, inputs, dynamic_shapes, self.threads, exported=exported)
        session.load()
        self.label = session.info.label
        return session

    def session(self, method: str, module: torch.nn.Module, inputs: tuple) -> OnnxRuntime | None:
        if self.dynamic is not None:
            return self.dynamic[method]
        buffer = io.BytesIO()
        start = time.perf_counter()
        try:
            with torch.no_grad():
                # A copy: the TorchScript exporter changes the module it traces (benchmarks/tts.py measured it).
                torch.onnx.export(copy.deepcopy(module), inputs, buffer, dynamo=False, opset_version=17)
        except Exception as error:  # torch.onnx raises its own errors and the tracer's
            self.failures.append(f"TorchScript: {_reason(str(error))}")
            self.how = "not exported: " + "; ".join(dict.fromkeys(self.failures))
            return None
        exported = OnnxExport(buffer.getvalue(), time.perf_counter() - start, ("torch.onnx.export(dynamo=False)",))
        return self._loaded(module, inputs, None, exported)


def _reason(message: str) -> str:
    """An exporter's failure in one plain line: its first line, without terminal colours or bench's remedy."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", message.splitlines()[0] if message else "")
    return plain.split("; leave onnxruntime")[0]


def _reference(module: torch.nn.Module, long_run: torch.nn.Module | None, whole_input: bool) -> torch.nn.Module:
    """The eager module a method is compared with: the model's own forward on the whole input (`long_run`) where the
    program takes one window that carries its state to the next, or one of the model's chunks of a longer input;
    else the method's own module."""
    return long_run if whole_input and long_run is not None else module


def _whole(program: Program, method: str, inputs: tuple) -> Callable[[], torch.Tensor]:
    return lambda: program.run(inputs, method)[0]


def _in_windows(codec: Codec, method: str, inputs: tuple) -> Callable[[], torch.Tensor]:
    """A method run as `audiodeploy run` runs it on a longer input: in the program's overlapping windows, through
    `audiodeploy.runtime`, its output shaped as eager's."""
    # The methods' codes are (batch, frames, codebooks); the runtime's, (codebooks, frames) as transformers gives them.
    if method == "encode":
        samples = inputs[0].numpy().reshape(-1)
        return lambda: torch.from_numpy(codec.encode(samples, sample_rate=codec.spec.sample_rate).T.copy())
    codes = inputs[0][0].numpy().T
    return lambda: codec.decode(codes).samples


def _in_chunks(codec: ChunkedCodec, method: str, inputs: tuple, samples: int) -> Callable[[], torch.Tensor]:
    """A method run as `audiodeploy run` runs a chunked codec on a longer input: chunk by chunk, through
    `audiodeploy.runtime`, its output shaped as transformers' (codes: `(chunks, 1, codebooks, frames)`)."""
    if method == "encode":
        audio = inputs[0][0].numpy()
        return lambda: torch.from_numpy(codec.encode(audio).codes[:, None])
    # transformers also encodes the sliver of padding after the last chunk that starts inside the audio; the
    # runtime's codes stop at that chunk.
    chunks = -(-samples // codec.chunks.stride)
    scales = inputs[1][:chunks].numpy().reshape(-1) if codec.chunks.scaled else None
    chunked = ChunkedCodes(inputs[0][:chunks, 0].numpy(), scales, samples)
    return lambda: codec.decode(chunked).samples


def _timed(
    ours: Callable[[], torch.Tensor], module: torch.nn.Module, onnx: OnnxRuntime | None, inputs: tuple, runs: int
) -> dict:
    """The runtimes alternated, a warm-up each first; the medians, their ratios, and how far each output is from
    eager's."""
    runners = {"audiodeploy": ours, "eager": lambda: first_output(module(*inputs))}
    if onnx is not None:
        runners["onnxruntime"] = lambda: first_output(onnx.run(inputs))
    times: dict[str, list[float]] = {name: [] for name in runners}
    outputs: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for run in range(runs + 1):
            for name, runner in runners.items():
                start = time.perf_counter()
                outputs[name] = runner()
                if run:
                    times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(times[name]) for name in runners}
    case = {
        "audiodeploy_ms": median["audiodeploy"] * 1e3,
        "eager_ms": median["eager"] * 1e3,
        "ratio": median["audiodeploy"] / median["eager"],
        "difference": _difference(outputs["audiodeploy"], outputs["eager"]),
    }
    if onnx is not None:
        case |= {
            "onnxruntime_ms": median["onnxruntime"] * 1e3,
            "onnxruntime_ratio": median["audiodeploy"] / median["onnxruntime"],
            "onnxruntime_difference": _difference(outputs["onnxruntime"], outputs["eager"]),
        }
    return case


def _difference(actual: torch.Tensor, expected: torch.Tensor) -> str:
    if actual.dtype.is_floating_point and expected.shape[-1] > actual.shape[-1]:
        # transformers decodes a chunked codec's padding after the audio too; the runtime gives the audio's length.
        expected = expected[..., : actual.shape[-1]]
    elif not actual.dtype.is_floating_point and actual.dim() == 4 and expected.shape[0] > actual.shape[0]:
        # Its codes of a chunked codec: the chunks that start inside the audio, not the sliver after them.
        expected = expected[: actual.shape[0]]
    if actual.numel() == expected.numel():
        actual = actual.reshape(expected.shape)
    if actual.dtype.is_floating_point:
        return f"max abs diff {float((actual - expected).abs().max()):.2e}"
    return f"{int((actual != expected).sum())} of {expected.numel()} codes differ"


if __name__ == "__main__":
    main()
