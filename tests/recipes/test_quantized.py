"""int8 recipes end to end: build the tiny variant, quantize with the recipe's defaults, lower, run with the
real runtime, compare with fp32 eager on inputs not used for calibration.

Bars (this machine, AVX-512 VNNI; tiny models, seeded synthetic weights):
- speech encoder (wav2vec2 tiny, the program tests/lowering/test_quantize.py reads; int8-dynamic, the recipe's
  keep_fp32): one delegate, nothing outside, every GEMM int8 but the first convolution and the head; logits
  SNR >= 28 dB and frame argmax agreement >= 93% at the shortest and longest input (HuBERT tiny, measured before
  the program was shared: 31.1 dB and 96.7%; with the whole feature encoder fp32, the default until 2026-12-01,
  43 dB);
- vocoders (SpeechT5's HiFi-GAN tiny, the original's tiny-v3 and Vocos tiny with its head fp32, int8-static
  calibrated on audio files through the recipe's mel front end): one delegate; waveform SNR >= 20 dB on held-out
  speech-like audio (measured: 27 dB for SpeechT5's). UnivNet and BigVGAN take no int8 scheme (see
  recipes/univnet.py and recipes/bigvgan.py for why).
The defaults' module patterns are checked against every family and source by export alone (seconds), and the
module-scoped programs are lowered once per file.
"""

from __future__ import annotations

import fnmatch
import math
import os

import numpy as np
import pytest
import soundfile
import torch

import audiodeploy
from audiodeploy import recipes
from audiodeploy.lowering.passes import rewrite_for_xnnpack
from audiodeploy.lowering.passes.fold_computed_gemm_weights import apply_folds, plan_folds
from audiodeploy.lowering.quantize import Quantization, QuantizationScheme, quantize_program
from audiodeploy.program import fidelity
from audiodeploy.program.audio import AudioFile
from audiodeploy.program.report import QuantizationReport, QuantizedMethod
from audiodeploy.recipes.calibration import (
    MIN_CALIBRATION_SECONDS,
    calibration_files,
    calibration_inputs,
    calibration_set,
    fidelity_measures,
    fidelity_warnings,
)
from audiodeploy.recipes.errors import CalibrationError, QuantizationSchemeError, RecipeError
from audiodeploy.recipes.spec import LengthRange
from audiodeploy.runtime import Program
from tests.pipeline import int8_dynamic_tiny_wav2vec2
from tests.recipes.helpers import assert_one_line

ENCODER_SNR_DB = 28.0
ENCODER_ARGMAX = 0.93
VOCODER_SNR_DB = 20.0
TEST_RANGE = {"ctc-asr": LengthRange(0.5, 2.0)}
VOCODER_LENGTH = LengthRange.fixed(0.25)
SPEECH_ENCODERS = ("wav2vec2", "hubert", "wavlm")
GEMMS = {torch.ops.aten.linear.default, torch.ops.aten.conv1d.default, torch.ops.aten.convolution.default}


def speech_like(sample_rate: int, seconds: float, seed: int) -> np.ndarray:
    """A voiced, amplitude-modulated harmonic sweep over a little noise: what a recording is, roughly."""
    generator = np.random.default_rng(seed)
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    f0 = 100.0 + 150.0 * generator.random()
    voiced = sum(0.3 / k * np.sin(2 * math.pi * k * f0 * t * (1 + 0.3 * t)) for k in range(1, 8))
    envelope = 0.5 * (1 + np.sin(2 * math.pi * 3 * t))
    return (voiced * envelope + 0.01 * generator.standard_normal(t.size)).astype(np.float32)


def run(lowered, inputs) -> list[torch.Tensor]:
    program = Program(lowered.buffer)
    return [program.run(case)[0] for case in inputs]


def eager(built, inputs) -> list[torch.Tensor]:
    with torch.no_grad():
        return [built.module(*case) for case in inputs]


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory):
    """Five recordings at 16, 22.05 and 44.1 kHz (resampled on reading), 0.05-3 s, and a text file among them."""
    directory = tmp_path_factory.mktemp("calibration")
    for index, (rate, seconds) in enumerate(
        [(16_000, 0.05), (22_050, 0.4), (16_000, 1.3), (22_050, 3.0), (44_100, 0.8)]
    ):
        soundfile.write(directory / f"take{index}.wav", speech_like(rate, seconds, seed=index), rate)
    (directory / "README.txt").write_text("not audio\n")
    return directory


# Declarations and defaults: no lowering.


def test_every_recipe_declares_known_schemes_and_keep_fp32_for_its_own_sources():
    for name in recipes.available():
        recipe = recipes.get(name)
        assert set(recipe.int8_schemes) <= set(QuantizationScheme), name
        assert set(recipe.int8_keep_fp32) <= set(recipe.sources), name
    assert recipes.get("wav2vec2").describe()["int8_schemes"] == ["int8-dynamic", "int8-static"]


def kept_fp32_gemms(name: str, variant: str, source: str) -> list[str]:
    """The innermost module path of every GEMM of the exported tiny `variant` that the default keep_fp32
    patterns name; fails on a pattern that names no GEMM."""
    recipe = recipes.get(name)
    built = recipe.build(variant=variant, source=source, length_range=TEST_RANGE["ctc-asr"])
    program = torch.export.export(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes)
    innermost = [
        list(node.meta["nn_module_stack"].values())[-1][0]
        for node in program.graph.nodes
        if node.op == "call_function" and node.target in GEMMS
    ]
    patterns = recipe.default_keep_fp32(source, variant)
    assert all(any(fnmatch.fnmatchcase(path, p) for path in innermost) for p in patterns)  # no dead pattern
    return [path for path in innermost if any(fnmatch.fnmatchcase(path, p) for p in patterns)]


@pytest.mark.parametrize("name", SPEECH_ENCODERS)
@pytest.mark.parametrize("source", ["transformers", "torchaudio"])
def test_speech_encoder_keep_fp32_defaults_name_the_first_convolution_and_the_ctc_head(name, source):
    kept = kept_fp32_gemms(name, "tiny", source)
    head = "model.lm_head" if source == "transformers" else "model.aux"
    assert head in kept and any(path.endswith("feature_extractor.conv_layers.0.conv") for path in kept), kept
    assert len(kept) == 2, kept  # the convolution on raw samples and the head, nothing else


@pytest.mark.parametrize("source", ["transformers", "torchaudio"])
def test_wavlm_large_keeps_its_whole_feature_encoder_and_the_ctc_head_fp32(source):
    wavlm = recipes.get("wavlm")
    kept = kept_fp32_gemms("wavlm", "tiny-large", source)
    head = "model.lm_head" if source == "transformers" else "model.aux"
    convolutions = len(wavlm.variant("large").architecture.feature_encoder)
    assert kept[-1] == head and len(kept) == convolutions + 1, kept
    assert [path.rsplit(".", 2)[-2] for path in kept[:-1]] == [str(n) for n in range(convolutions)], kept
    # The test-size variant declares what the published one does; the other variants keep the recipe's.
    assert wavlm.default_keep_fp32(source, "tiny-large") == wavlm.default_keep_fp32(source, "large")
    assert wavlm.default_keep_fp32(source, "base-plus") == wavlm.default_keep_fp32(source)
    assert recipes.get("wav2vec2").default_keep_fp32(source, "large") == recipes.get("wav2vec2").default_keep_fp32(
        source
    )


@pytest.mark.parametrize(
    ("name", "scheme"),
    [
        ("hifigan", "int8-dynamic"),
        ("speecht5-hifigan", "int8-dynamic"),
        ("univnet", "int8-dynamic"),
        ("univnet", "int8-static"),
        ("bigvgan", "int8-static"),
        ("vocos", "int8-dynamic"),
    ],
)
def test_vocoder_asked_for_a_scheme_it_cannot_take_is_one_line(name, scheme):
    with pytest.raises(QuantizationSchemeError) as caught:
        recipes.get(name).check_int8_scheme(scheme)
    assert isinstance(caught.value, RecipeError)
    assert_one_line(caught.value, f"recipe '{name}' cannot be quantized as '{scheme}'", "fp32")
    assert recipes.get("hubert").check_int8_scheme("int8-dynamic") == "int8-dynamic"


# Calibration audio.


def test_calibration_files_expand_a_directory_to_its_audio_files_sorted(audio_dir, tmp_path):
    files = calibration_files([audio_dir])
    assert [f.name for f in files] == [f"take{i}.wav" for i in range(5)]
    assert calibration_files([files[2], audio_dir / "README.txt"]) == [files[2], audio_dir / "README.txt"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationError) as caught:
        calibration_files([tmp_path / "empty"])
    assert_one_line(caught.value, "empty", "holds no audio files")
    with pytest.raises(CalibrationError) as caught:
        calibration_files([tmp_path / "missing.wav"])
    assert_one_line(caught.value, "missing.wav", "no such file")


def test_calibration_file_that_is_not_audio_is_one_line_naming_it(audio_dir):
    built = recipes.get("hubert").build(variant="tiny", length_range=TEST_RANGE["ctc-asr"])
    with pytest.raises(CalibrationError) as caught:
        calibration_inputs(built, [audio_dir / "take0.wav", audio_dir / "README.txt"])
    assert isinstance(caught.value, RecipeError)
    assert_one_line(caught.value, "README.txt", "not a readable audio file", "give a wav, flac or ogg file")


def test_waveform_calibration_inputs_are_lengths_the_program_takes(audio_dir):
    built = recipes.get("hubert").build(variant="tiny", length_range=TEST_RANGE["ctc-asr"])
    spec = built.input
    inputs = calibration_inputs(built, calibration_files([audio_dir]))
    lengths = [case[0].shape[-1] for case in inputs]
    assert all(spec.min_length <= n <= spec.max_length and n % spec.length_multiple == 0 for n in lengths)
    assert lengths[0] == spec.min_length  # 0.05 s, repeated up to the shortest input
    assert inputs[0][0][0, 800:1600].equal(inputs[0][0][0, :800])
    assert lengths[2] == spec.padded_length(int(1.3 * 16_000))  # 1.3 s: a multiple of 320 above it
    # 3 s in windows of the 2 s the program takes, the second moved back to end at the file's end.
    assert lengths[3:5] == [spec.max_length, spec.max_length] and len(lengths) == 6
    with AudioFile(audio_dir / "take3.wav", built.sample_rate) as audio:
        assert inputs[4][0][0].numpy().tobytes() == audio.read(audio.total - spec.max_length, audio.total).tobytes()
    assert all(case[0].dtype == torch.float32 and case[0].shape[0] == 1 for case in inputs)


def test_calibration_file_under_the_minimum_is_refused_and_one_at_it_is_repeated_with_a_note(tmp_path):
    built = recipes.get("hubert").build(variant="tiny", length_range=TEST_RANGE["ctc-asr"])
    rate = built.sample_rate
    soundfile.write(tmp_path / "short.wav", speech_like(rate, MIN_CALIBRATION_SECONDS * 0.8, 0), rate)
    soundfile.write(tmp_path / "enough.wav", speech_like(rate, MIN_CALIBRATION_SECONDS, 0), rate)
    with pytest.raises(CalibrationError) as caught:
        calibration_set(built, [tmp_path / "enough.wav", tmp_path / "short.wav"])
    assert_one_line(caught.value, "short.wav", "0.04 s long", "shorter than the 0.05 s", "give recordings")
    chosen = calibration_set(built, [tmp_path / "enough.wav"])
    assert [case[0].shape[-1] for case in chosen.inputs] == [built.input.min_length]
    assert chosen.notes == (
        f"{tmp_path / 'enough.wav'}: shorter than the program's shortest input (0.5 s), repeated up to it for calibration",
    )


def test_calibration_limit_keeps_inputs_spread_over_the_files_and_says_what_was_left_out(audio_dir):
    built = recipes.get("hubert").build(variant="tiny", length_range=TEST_RANGE["ctc-asr"])
    files = calibration_files([audio_dir])
    everything = calibration_inputs(built, files)
    heard = []
    chosen = calibration_set(built, files, limit=2, progress=lambda number, total: heard.append((number, total)))
    # Files 0 and 2 of 5 (evenly spaced), one input each; a third would pass the limit.
    assert [case[0].shape for case in chosen.inputs] == [everything[0][0].shape, everything[2][0].shape]
    assert chosen.inputs[1][0].equal(everything[2][0]) and heard == [(1, 2), (2, 2)]
    assert chosen.notes[-1] == (
        "calibrating on 2 inputs from 2 of the 5 calibration files (--calibrate-limit 2); the other 3 were left "
        "out: raise --calibrate-limit to use more"
    )
    # Spread over 4 of the 5 files, the limit is reached inside take3's two windows: one of them is kept.
    assert len(calibration_set(built, files, limit=4).inputs) == 4
    (repeated,) = calibration_set(built, files).notes  # the default limit leaves nothing out here
    assert repeated.startswith(f"{files[0]} and 1 more: shorter than")  # take0 (0.05 s) and take1 (0.4 s)


def test_calibration_path_that_is_not_a_regular_file_is_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe.wav")
    with pytest.raises(CalibrationError) as caught:
        calibration_files([tmp_path / "pipe.wav"])
    assert_one_line(caught.value, "pipe.wav", "not a regular file")
    soundfile.write(tmp_path / "take.wav", speech_like(16_000, 0.1, 0), 16_000)
    assert calibration_files([tmp_path]) == [tmp_path / "take.wav"]  # a pipe in a directory is not audio


def test_fidelity_under_the_floor_is_one_warning_line_per_measure():
    def report(fidelity: dict[str, float], methods: tuple[str, ...] = ("forward",)) -> QuantizationReport:
        return QuantizationReport(
            "int8-static", "1 given inputs", fidelity_inputs="2 generated signals",
            methods={m: QuantizedMethod(m, fidelity=fidelity) for m in methods},
        )  # fmt: skip

    assert fidelity_warnings(report({"snr_db": 15.0, "max_abs_diff": 9.0, "argmax_agreement": 0.0})) == ()
    (warning,) = fidelity_warnings(report({"snr_db": -2.84, "max_abs_diff": 0.5}))
    assert warning.startswith(
        "int8 output SNR -2.8 dB against fp32 (on 2 generated signals) is below the 15 dB floor: "
    )
    assert "--calibrate" in warning and "--keep-fp32" in warning and "\n" not in warning
    (warning,) = fidelity_warnings(report({"waveform_snr_db": float("nan")}))
    assert "waveform SNR nan dB" in warning
    assert [w.split(":")[0] for w in fidelity_warnings(report({"snr_db": 3.0}, ("encode", "decode")))] == [
        "method encode",
        "method decode",
    ]


def test_int8_static_vocoder_calibrates_on_its_longest_input_past_the_folds_narrowed_guard():
    """The fold's fake-tensor runs narrow the program's shape guard to 160 frames for a 1 s example (tiny HiFi-GAN,
    exported for 87-173 frames): calibrating on the longest input failed ("Guard failed: 128 * mel.size()[1] <=
    20480"). Quantized without XNNPACK: seconds."""
    built = recipes.get("hifigan").build(variant="tiny-v3", length_range=LengthRange(1.0, 2.0))
    spec = built.input
    assert spec.max_length > 160 > spec.example_length
    ep = torch.export.export(
        built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes
    ).run_decompositions({})
    rewrite_for_xnnpack(ep)
    folded, _ = apply_folds(ep, list(plan_folds(ep).candidates))
    longest = built.random_inputs(spec.max_length, seed=3)
    quantized = quantize_program(
        folded, QuantizationScheme.INT8_STATIC, dynamic_shapes=built.dynamic_shapes, calibration=[longest]
    )
    assert quantized.calibration == "1 given inputs" and quantized.quantized_gemms
    (frames,) = quantized.program.range_constraints.values()
    assert (frames.lower, frames.upper) == (spec.min_length, spec.max_length)


# End to end: lowered once per module.


@pytest.fixture(scope="module")
def quantized_encoder():
    """wav2vec2 tiny lowered int8-dynamic with the recipe's keep_fp32, the program tests/lowering/test_quantize.py
    and the native runner's tests read (one int8 lowering of a speech encoder per test run)."""
    built, lowered, _ = int8_dynamic_tiny_wav2vec2()
    return built, lowered


def test_int8_dynamic_speech_encoder_is_one_delegate_within_the_bar_at_both_ends(quantized_encoder):
    built, lowered = quantized_encoder
    method = lowered.report.methods["forward"]
    assert (method.delegates, method.ops_outside_delegates) == (1, {}), str(lowered.report)
    quantization = lowered.report.quantization
    assert quantization.keep_fp32 == ("*.feature_extractor.conv_layers.0.*", "*.lm_head")
    gemms = quantization.methods["forward"]
    assert [g.gemm for g in gemms.fp32_gemms] == [
        "conv2d @ model.wav2vec2.feature_extractor.conv_layers.0.conv",
        "linear @ model.lm_head",
    ]
    # The positional convolution too: written as the 2-D convolution XNNPACK's dynamic int8 takes.
    assert "conv2d @ model.wav2vec2.encoder.pos_conv_embed.conv" in gemms.quantized_gemms
    convolutions = len(built.module.model.wav2vec2.feature_extractor.conv_layers)
    assert sum("feature_extractor" in g for g in gemms.quantized_gemms) == convolutions - 1
    spec = built.input
    held_out = [built.random_inputs(n, seed=11 + n) for n in (spec.min_length, spec.max_length)]
    measured = fidelity.measure(
        eager(built, held_out),
        run(lowered, held_out),
        {"snr_db": fidelity.output_snr_db, "argmax": fidelity.frame_argmax_agreement},
    )
    assert measured["snr_db"] >= ENCODER_SNR_DB and measured["argmax"] >= ENCODER_ARGMAX, measured


# The original HiFi-GAN as its type-2 resblock variant: tiny-v1's quantized convolutions took 140 s here (78 of them,
# before the test size kept two of the three residual blocks per stage).
@pytest.fixture(
    scope="module", params=[("speecht5-hifigan", "tiny"), ("hifigan", "tiny-v3"), ("vocos", "tiny")], ids=lambda p: p[0]
)
def quantized_vocoder(audio_dir, request):
    name, variant = request.param
    recipe = recipes.get(name)
    # One fixed length: XNNPACK's passes over the 74 quantized convolutions take twice as long with a symbolic one.
    built = recipe.build(variant=variant, length_range=VOCODER_LENGTH)
    calibration = calibration_inputs(built, calibration_files([audio_dir / f"take{i}.wav" for i in range(5)]))
    int8 = Quantization(
        QuantizationScheme(recipe.check_int8_scheme("int8-static")),
        calibration=calibration,
        keep_fp32=built.keep_fp32,
        fidelity_inputs=held_out_speech(built),
        fidelity=fidelity_measures(built),  # what export measures, here on inputs of one length
    )
    lowered = audiodeploy.lower(
        built.module,
        built.example_inputs,
        dynamic_shapes=built.dynamic_shapes,
        options=audiodeploy.LoweringOptions(quantization=int8),
    )
    return built, calibration, lowered


def held_out_speech(built) -> list[tuple[torch.Tensor, ...]]:
    """Two speech-like mels of the program's one length, not among the calibration files."""
    return [
        (built.mel(speech_like(built.sample_rate, 0.3, seed=50 + i))[:, : built.input.max_length],) for i in range(2)
    ]


def test_vocoder_calibration_inputs_are_the_recipe_front_end_frames(quantized_vocoder, audio_dir):
    built, calibration, _ = quantized_vocoder
    spec = built.input
    frames = [case[0].shape[1] for case in calibration]
    assert all(spec.min_length <= n <= spec.max_length for n in frames), frames
    assert frames[3] == spec.max_length  # 3 s, cut to the 0.25 s the program takes
    assert frames[0] == spec.min_length  # 0.05 s, repeated up to the shortest input
    with AudioFile(audio_dir / "take1.wav", built.sample_rate) as audio:  # 0.4 s at 22.05 kHz, read at 16 kHz
        expected = built.mel(audio.read(0, audio.total))[:, : spec.max_length]
    torch.testing.assert_close(calibration[1][0], expected, rtol=0, atol=0)


def test_int8_static_vocoder_from_calibration_files_is_one_delegate_within_the_bar(quantized_vocoder):
    built, calibration, lowered = quantized_vocoder
    method = lowered.report.methods["forward"]
    assert method.delegates == 1 and method.gemms_not_delegated == (), str(lowered.report)
    quantization = lowered.report.quantization
    assert quantization.calibration == f"{len(calibration)} given inputs"
    assert quantization.methods["forward"].quantized_gemms
    reported = quantization.methods["forward"].fidelity
    assert reported["waveform_snr_db"] >= VOCODER_SNR_DB and 0 < reported["log_mel_distance"] < 1, reported
    # The report's figures are the program's, run by the runtime the command line uses.
    held_out = held_out_speech(built)
    measured = fidelity.measure(eager(built, held_out), run(lowered, held_out), {"snr_db": fidelity.waveform_snr_db})
    assert measured["snr_db"] == pytest.approx(reported["waveform_snr_db"], abs=0.5), (measured, reported)
