"""Whether a codec keeps its fidelity in int8: each method of its program lowered `int8-static` (calibrated on
speech-like audio, or the codes eager encode gives for it), against the fp32 eager model on other audio; and a
text-to-speech program's decode (latents to speech), calibrated on unit-normal latents, as its host draws them.

    python benchmarks/codec_int8.py                   # dac 16khz, mimi 8-codebooks, encodec 24khz-6kbps, vits
    python benchmarks/codec_int8.py dac --variant 24khz

`encode` is measured by the codes that differ from fp32 eager's (a codec's codes are its output: a code that moves
is a different token for whatever reads them); `decode`, on eager's codes, by the waveform's SNR and log-mel
distance against fp32 eager's decode. With synthetic weights these numbers say how int8 treats the architecture,
not how a trained model sounds. Writes benchmarks/results/<recipe>-<variant>-int8-codec.json. Nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

import audiodeploy
from audiodeploy import recipes
from audiodeploy._files import atomic_write_text
from audiodeploy.bench.timing import machine_info, set_threads
from audiodeploy.program.fidelity import waveform_snr_db
from audiodeploy.recipes.spec import LengthRange, fresh_state
from audiodeploy.runtime.program import Program

RESULTS = Path(__file__).resolve().parent / "results"
CODECS = (("dac", "16khz"), ("mimi", "8-codebooks"), ("encodec", "24khz-6kbps"), ("vits", "mms-tts"))
CALIBRATION_SEEDS = (0, 1, 2, 3)
FIDELITY_SEEDS = (10, 11)


def speech_like(samples: int, rate: int, seed: int) -> torch.Tensor:
    """`(1, samples)`: a voiced tone whose pitch and loudness move, its harmonics, and breath noise."""
    generator = torch.Generator().manual_seed(seed)
    t = torch.arange(samples) / rate
    pitch = 110 + 60 * torch.rand(1, generator=generator) + 20 * torch.sin(2 * math.pi * 3 * t)
    phase = 2 * math.pi * torch.cumsum(pitch, 0) / rate
    voiced = sum(torch.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 + 0.5 * torch.sin(2 * math.pi * (1 + torch.rand(1, generator=generator)) * t).abs()
    noise = 0.02 * torch.randn(samples, generator=generator)
    return (0.2 * envelope * voiced + noise)[None].float()


def log_mel_distance(reference: torch.Tensor, actual: torch.Tensor, rate: int) -> float:
    """Mean absolute difference of natural-log mel spectrograms (80 bands, 1024-point frames, hop 256)."""
    import torchaudio

    mel = torchaudio.transforms.MelSpectrogram(rate, n_fft=1024, hop_length=256, n_mels=80)
    return float((mel(reference).clamp(min=1e-5).log() - mel(actual).clamp(min=1e-5).log()).abs().mean())


def _lowered(module: torch.nn.Module, example: tuple, calibration: list[tuple]) -> Program:
    quantization = audiodeploy.Quantization(audiodeploy.QuantizationScheme.INT8_STATIC, calibration=calibration)
    lowered = audiodeploy.lower(module, example, options=audiodeploy.LoweringOptions(quantization=quantization))
    return Program(lowered.buffer, trusted=True)


def _record(built: recipes.BuiltModel, seconds: float, calibration: str, cases: list[dict]) -> dict:
    return {
        "benchmark": "codec-int8",
        "recipe": built.recipe,
        "variant": built.variant,
        "weights": built.weights_provenance,
        "seconds": seconds,
        "scheme": "int8-static",
        "calibration": calibration,
        "machine": machine_info(torch.get_num_threads()),
        "cases": cases,
    }


def measure_speech_decoder(built: recipes.BuiltModel, seconds: float) -> dict:
    """A text-to-speech program's decode: latents of `seconds` of speech to the waveform."""
    frames = built.input.length_for_seconds(seconds)
    print(f"{built.recipe} {built.variant}: lowering decode int8-static", flush=True)
    calibration = [built.random_inputs(frames, seed) for seed in CALIBRATION_SEEDS]
    decode = _lowered(built.module, calibration[0], calibration)
    cases = []
    for seed in FIDELITY_SEEDS:
        inputs = built.random_inputs(frames, seed)
        with torch.no_grad():
            reference = built.module(*inputs)
        waveform = decode.run(inputs)[0].reshape(reference.shape)
        cases.append(
            {
                "seed": seed,
                "decode_snr_db": round(waveform_snr_db(reference, waveform), 2),
                "decode_log_mel_distance": round(log_mel_distance(reference, waveform, built.sample_rate), 4),
            }
        )
        print(f"  {cases[-1]}", flush=True)
    return _record(built, seconds, f"{len(CALIBRATION_SEEDS)} unit-normal latents (decode)", cases)


def measure(recipe_name: str, variant: str, seconds: float) -> dict:
    built = recipes.get(recipe_name).build(variant=variant, length_range=LengthRange.fixed(seconds))
    if built.decoder is None:
        return measure_speech_decoder(built, seconds)
    rate, samples = built.sample_rate, built.input.max_length
    state = fresh_state(built.carried)
    audio = {seed: speech_like(samples, rate, seed) for seed in CALIBRATION_SEEDS + FIDELITY_SEEDS}
    with torch.no_grad():
        encoded = {seed: built.module(a, *state) for seed, a in audio.items()}
        codes = {seed: built.decoder.inputs_for(e) for seed, e in encoded.items()}
        decoded = {seed: built.decoder.module(*c) for seed, c in codes.items()}
    first = {seed: e[0] if isinstance(e, tuple) else e for seed, e in encoded.items()}
    print(f"{recipe_name} {variant}: lowering encode int8-static", flush=True)
    encode = _lowered(built.module, (audio[0], *state), [(audio[s], *state) for s in CALIBRATION_SEEDS])
    print(f"{recipe_name} {variant}: lowering decode int8-static", flush=True)
    decode = _lowered(built.decoder.module, codes[0], [codes[s] for s in CALIBRATION_SEEDS])
    cases = []
    for seed in FIDELITY_SEEDS:
        int8_codes = encode.run((audio[seed], *state))[0]
        reference = decoded[seed]
        reference = reference[0] if isinstance(reference, tuple) else reference
        waveform = decode.run(codes[seed])[0].reshape(reference.shape)
        cases.append(
            {
                "seed": seed,
                "codes_differing": int((int8_codes.reshape(first[seed].shape) != first[seed]).sum()),
                "codes": first[seed].numel(),
                "decode_snr_db": round(waveform_snr_db(reference, waveform), 2),
                "decode_log_mel_distance": round(log_mel_distance(reference, waveform, rate), 4),
            }
        )
        print(f"  {cases[-1]}", flush=True)
    calibration = f"{len(CALIBRATION_SEEDS)} speech-like signals (encode) and eager encode's codes of them (decode)"
    return _record(built, seconds, calibration, cases)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", help="one codec recipe; default: dac, mimi and encodec")
    parser.add_argument("--variant")
    parser.add_argument("--seconds", type=float, default=None, help="default: 1 s (2.5 s for mimi: its minimum)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_threads(args.threads)
    chosen = (
        CODECS if args.recipe is None else ((args.recipe, args.variant or recipes.get(args.recipe).default_variant),)
    )
    for recipe_name, variant in chosen:
        seconds = args.seconds or (2.5 if recipe_name == "mimi" else 1.0)
        record = measure(recipe_name, variant, seconds)
        path = RESULTS / f"{recipe_name}-{variant}-int8-codec.json"
        atomic_write_text(path, json.dumps(record, indent=2) + "\n")
        print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
