"""Text to speech timed: a `vits` program (with the runtime's host part) against eager transformers `VitsModel` and
ONNX Runtime on its ONNX export, interleaved, on a sentence and a paragraph, with the real-time factor.

`audiodeploy bench vits --method decode` measures the latents-to-speech method alone; this times the whole chain
from text, what `audiodeploy run vits.pte TEXT` runs (`Synthesizer.synthesize`: per sentence, ``encode``, the host's
expansion and noise, ``decode``) beside eager `VitsModel` holding the same weights (the recipe's synthetic ones for
the program's variant and seed), sentence by sentence from one seeded noise stream, as the runtime does. Both give
the same samples (the largest difference is recorded); each runtime's median of `--runs` after a warm-up,
alternated.

ONNX Runtime runs `VitsModel` whole, exported as Piper and sherpa-onnx export VITS (``torch.onnx.export``'s
TorchScript exporter, the noise drawn inside the graph), sentence by sentence. Its noise is its own, so its samples
differ; so that every runtime speaks the same number of frames, the durations' noise is 0 for all three here
(`Voice(noise_scale_duration=0)`), the latents' noise the voice's.

    audiodeploy export vits -o vits.pte && python benchmarks/tts.py vits.pte

Writes benchmarks/results/vits-<variant>-tts.json (`--name NAME`: NAME-tts.json). Take ratios on an idle machine.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from audiodeploy import recipes, runtime
from audiodeploy._files import atomic_write_text
from audiodeploy.bench.runtimes import onnxruntime_session_options
from audiodeploy.bench.timing import machine_info, restart_with_passive_openmp_threads, set_threads
from audiodeploy.program.tts import sentences

RESULTS = Path(__file__).resolve().parent / "results"

TEXTS = {
    "sentence": "The quick brown fox jumps over the lazy dog.",
    "paragraph": (
        "Audio models are full of weights that are computed from parameters. Weight norm sits on every convolution "
        "of a vocoder. This toolkit folds that computation into a constant, safely, and reports what stayed outside. "
        "Text to speech is the last piece: the text encoder, the durations, the flow and the vocoder. Each sentence "
        "runs once through each method, and the wav grows as it is spoken."
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", type=Path, help="a .pte written by `audiodeploy export vits` (synthetic weights)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", help="names the result file: NAME-tts.json; default: vits-VARIANT")
    args = parser.parse_args()
    restart_with_passive_openmp_threads(sys.argv)
    threads = set_threads(args.threads)
    synthesizer = runtime.load(args.program)
    assert isinstance(synthesizer, runtime.Synthesizer), f"{args.program} is not a text-to-speech program"
    described = synthesizer.description
    if not described.weights.startswith("synthetic (seed 0)"):
        raise SystemExit("give a program exported without --weights (seed 0): eager is built from the same recipe")
    built = recipes.get("vits").build(variant=described.variant)
    assert built.text_encoder is not None
    eager = _eager_vits_model(built)
    eager.noise_scale_duration = 0.0  # every runtime speaks the same frames: see the module's docstring
    folder = tempfile.TemporaryDirectory()
    session = _onnx_session(eager, Path(folder.name) / "vits.onnx", threads)
    sidecar = json.loads(args.program.with_suffix(".json").read_text())
    record: dict = {
        "benchmark": "tts",
        "recipe": "vits",
        "variant": described.variant,
        "weights": described.weights,
        "machine": machine_info(threads),
        "program_bytes": args.program.stat().st_size,
        "methods": {
            name: {"delegates": m["delegates"], "ops_outside_delegates": m["ops_outside_delegates"]}
            for name, m in sidecar["lowering"]["methods"].items()
        },
        "cases": [],
    }
    rate = described.sample_rate
    for name, text in TEXTS.items():
        voice = runtime.Voice(seed=args.seed, noise_scale_duration=0.0)
        times: dict[str, list[float]] = {"audiodeploy": [], "eager": [], "onnxruntime": []}
        outputs: dict[str, np.ndarray] = {}
        for run in range(args.runs + 1):
            for which in times:
                start = time.perf_counter()
                if which == "eager":
                    outputs[which] = _speak_eagerly(eager, built, text, args.seed)
                elif which == "onnxruntime":
                    outputs[which] = _speak_onnx(session, built, text)
                else:
                    outputs[which] = synthesizer.synthesize(text, voice).samples.numpy()
                if run:
                    times[which].append(time.perf_counter() - start)
        ours, theirs, onnx = (statistics.median(times[k]) for k in ("audiodeploy", "eager", "onnxruntime"))
        seconds = outputs["audiodeploy"].size / rate
        same_length = outputs["audiodeploy"].size == outputs["eager"].size
        difference = float(np.abs(outputs["audiodeploy"] - outputs["eager"]).max()) if same_length else None
        case = {
            "text": name,
            "characters": len(text),
            "sentences": len(list(sentences(text))),
            "speech_seconds": round(seconds, 3),
            "audiodeploy_ms": ours * 1e3,
            "eager_ms": theirs * 1e3,
            "ratio": ours / theirs,
            "onnxruntime_ms": onnx * 1e3,
            "onnxruntime_ratio": ours / onnx,
            "audiodeploy_rtf": ours / seconds,
            "eager_rtf": theirs / seconds,
            "onnxruntime_rtf": onnx / seconds,
            "onnxruntime_same_length": outputs["onnxruntime"].size == outputs["audiodeploy"].size,
            "max_abs_diff": difference,
        }
        record["cases"].append(case)
        print(
            f"{name} ({seconds:.2f} s of speech): audiodeploy {ours * 1e3:.1f} ms (RTF {ours / seconds:.3f}), eager "
            f"{theirs * 1e3:.1f} ms (RTF {theirs / seconds:.3f}), ONNX Runtime {onnx * 1e3:.1f} ms (RTF "
            f"{onnx / seconds:.3f}): {ours / theirs:.3f}x eager's time, {ours / onnx:.3f}x ONNX Runtime's; "
            f"max abs diff from eager {difference}",
            flush=True,
        )
    folder.cleanup()
    path = RESULTS / f"{args.name or f'vits-{described.variant}'}-tts.json"
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


def _eager_vits_model(built: recipes.BuiltModel) -> torch.nn.Module:
    """transformers `VitsModel` holding the built wrappers' modules (the recipe's weights)."""
    from transformers import VitsModel

    assert built.text_encoder is not None
    encode, decode = built.text_encoder.module, built.module
    model = VitsModel(encode.text_encoder.config)
    model.text_encoder, model.duration_predictor = encode.text_encoder, encode.duration_predictor
    model.flow, model.decoder = decode.flow, decode.decoder
    return model.eval()


class _Waveform(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids).waveform


def _onnx_session(model: torch.nn.Module, path: Path, threads: int):
    """`model` whole in ONNX Runtime, exported by torch.onnx's TorchScript exporter (what Piper and sherpa-onnx use:
    the dynamo exporter cannot follow the durations' data-dependent length)."""
    import onnxruntime

    ids = torch.randint(1, 30, (1, 41))
    # A copy: the TorchScript exporter leaves the model it traces changed (its durations differed after, measured).
    torch.onnx.export(
        _Waveform(copy.deepcopy(model)),
        (ids,),
        str(path),
        dynamo=False,
        input_names=["input_ids"],
        output_names=["waveform"],
        dynamic_axes={"input_ids": {1: "tokens"}, "waveform": {1: "samples"}},
        opset_version=17,
    )
    options = onnxruntime_session_options(threads)
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _speak_onnx(session, built: recipes.BuiltModel, text: str) -> np.ndarray:
    assert built.text_encoder is not None
    front_end = built.text_encoder.text.front_end
    pieces = [session.run(None, {"input_ids": front_end.token_ids(s)[None]})[0][0] for s in sentences(text)]
    return np.concatenate(pieces)


def _speak_eagerly(model: torch.nn.Module, built: recipes.BuiltModel, text: str, seed: int) -> np.ndarray:
    """`VitsModel` sentence by sentence from one seeded noise stream, the front end's token ids in."""
    assert built.text_encoder is not None
    front_end = built.text_encoder.text.front_end
    torch.manual_seed(seed)
    pieces = []
    with torch.no_grad():
        for sentence in sentences(text):
            ids = torch.from_numpy(front_end.token_ids(sentence))[None]
            pieces.append(model(ids).waveform[0].numpy())
    return np.concatenate(pieces)


if __name__ == "__main__":
    main()
