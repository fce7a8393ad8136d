"""The `audiodeploy` command end to end, through a subprocess, on tiny configurations of the real models."""

from __future__ import annotations

import json

import numpy as np
import soundfile

from tests.cli import assert_clean_error, audiodeploy, audiodeploy_importing, write_tone


def test_list_shows_every_recipe():
    result = audiodeploy("list")
    assert result.returncode == 0, result.stderr
    for name in ("wav2vec2", "hubert", "wavlm", "hifigan", "speecht5-hifigan", "univnet", "bigvgan", "vocos"):
        assert name in result.stdout


def test_export_then_run_prints_a_transcript(asr_model, tmp_path):
    sidecar = json.loads(asr_model.with_suffix(".json").read_text())
    assert sidecar["model"]["weights"].startswith("synthetic")
    wav = write_tone(tmp_path / "tone.wav", 1.2)  # stereo at 22.05 kHz: mixed down and resampled
    result = audiodeploy("run", str(asr_model), str(wav), "-o", str(tmp_path / "t.txt"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (tmp_path / "t.txt").read_text().strip()


def test_inspect_profile_shows_where_the_time_goes(asr_model):
    result = audiodeploy("inspect", "--profile", "--runs", "2", "--seconds", "0.5", "--seconds", "2", str(asr_model))
    assert result.returncode == 0, result.stderr
    assert "at 0.5 s (executorch)" in result.stdout and "at 2 s (executorch)" in result.stdout
    assert "Fully Connected (NC, F32) GEMM" in result.stdout and "model.wav2vec2.encoder.layers.0" in result.stdout
    assert "GFLOP/s" in result.stdout
    assert_clean_error(audiodeploy("inspect", "--runs", "3", str(asr_model)), "give --profile too")


def test_inspect_agrees_with_the_sidecar_and_imports_neither_torch_nor_the_lowering_core(asr_model):
    result, imported = audiodeploy_importing(
        "inspect", str(asr_model), modules=("torch", "executorch", "audiodeploy.lowering")
    )
    assert result.returncode == 0 and imported == [], (result, imported)
    sidecar = json.loads(asr_model.with_suffix(".json").read_text())
    delegates = sidecar["lowering"]["methods"]["forward"]["delegates"]
    assert f"method forward: {delegates} delegate call(s)" in result.stdout
    assert f"method forward: {delegates} XNNPACK delegate(s)" in result.stdout
    assert "wav2vec2 tiny" in result.stdout


def test_vocoder_run_on_a_mel_writes_a_wav_of_the_expected_length(vocoder_model, tmp_path):
    sidecar = json.loads(vocoder_model.with_suffix(".json").read_text())
    spec = sidecar["model"]["input"]
    frames = 20
    np.save(
        tmp_path / "mel.npy",
        np.random.default_rng(0).standard_normal((frames, spec["feature_size"])).astype(np.float32),
    )
    result = audiodeploy("run", str(vocoder_model), str(tmp_path / "mel.npy"), "-o", str(tmp_path / "out.wav"))
    assert result.returncode == 0, result.stderr
    audio, rate = soundfile.read(str(tmp_path / "out.wav"))
    assert rate == spec["sample_rate"]
    assert len(audio) == frames * spec["samples_per_step"]


def test_export_fp16_writes_a_half_precision_vocoder_that_runs_beside_its_fp32_one(vocoder_model, tmp_path):
    exported = audiodeploy(
        "export",
        "hifigan",
        "--variant",
        "tiny-v3",
        "--dtype",
        "fp16",
        "--min-seconds",  # across 160 frames, where torch's CPU convolution would switch kernels (once a guard)
        "0.1",
        "--max-seconds",
        "3",
        cwd=tmp_path,
    )
    assert exported.returncode == 0, exported.stderr
    assert "precision: float16" in exported.stdout and "fp32 tolerance 1e-03 not applied" in exported.stdout
    program = tmp_path / "hifigan-tiny-v3-fp16.pte"  # beside the fp32 program's name, not over it
    sidecar = json.loads(program.with_suffix(".json").read_text())
    precision = sidecar["lowering"]["precision"]
    assert precision["dtype"] == "float16" and precision["fidelity"]["forward"]["snr_db"] > 40
    fp32_sidecar = json.loads(vocoder_model.with_suffix(".json").read_text())
    frames = fp32_sidecar["model"]["input"]["max_length"]  # the longest both take: no window padded
    mel = np.random.default_rng(0).standard_normal((frames, 80)).astype(np.float32)
    np.save(tmp_path / "mel.npy", mel)
    for pte, wav in ((program, "half.wav"), (vocoder_model, "full.wav")):
        result = audiodeploy("run", str(pte), str(tmp_path / "mel.npy"), "-o", str(tmp_path / wav))
        assert result.returncode == 0, result.stderr
    half, _ = soundfile.read(str(tmp_path / "half.wav"))
    full, _ = soundfile.read(str(tmp_path / "full.wav"))
    assert half.shape == full.shape and np.abs(half - full).max() < 0.02  # 16-bit wavs of the same model
    longest = sidecar["model"]["input"]["max_length"]
    np.save(tmp_path / "long.npy", np.random.default_rng(1).standard_normal((longest, 80)).astype(np.float32))
    result = audiodeploy("run", str(program), str(tmp_path / "long.npy"), "-o", str(tmp_path / "long.wav"))
    assert result.returncode == 0, result.stderr
    assert len(soundfile.read(str(tmp_path / "long.wav"))[0]) == longest * sidecar["model"]["input"]["samples_per_step"]
    inspected = audiodeploy("inspect", str(program))
    assert inspected.returncode == 0 and "precision: float16" in inspected.stdout
    assert_clean_error(audiodeploy("export", "hifigan", "--dtype", "bf16", cwd=tmp_path), "--dtype bf16", "fp16")
    assert_clean_error(
        audiodeploy("export", "hifigan", "--dtype", "fp16", "--quantize", "int8-static", cwd=tmp_path), "choose one"
    )


def test_vocoder_run_on_a_waveform_computes_the_mel_first(vocoder_model, tmp_path):
    sidecar = json.loads(vocoder_model.with_suffix(".json").read_text())
    rate = sidecar["model"]["sample_rate"]
    wav = write_tone(tmp_path / "speech.wav", 0.5, sample_rate=rate, channels=1)
    result = audiodeploy("run", str(vocoder_model), str(wav))
    assert result.returncode == 0, result.stderr
    audio, out_rate = soundfile.read(str(tmp_path / "speech.vocoded.wav"))
    assert out_rate == rate and len(audio) > 0


# --- bad input ------------------------------------------------------------------------------


def test_unknown_recipe(tmp_path):
    assert_clean_error(audiodeploy("export", "wav2vec3", "-o", str(tmp_path / "x.pte")), "wav2vec3", "wav2vec2")
    assert list(tmp_path.iterdir()) == []


def test_unknown_variant(tmp_path):
    assert_clean_error(audiodeploy("export", "wav2vec2", "--variant", "huge", "-o", str(tmp_path / "x.pte")), "huge")
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output_path(tmp_path):
    assert_clean_error(
        audiodeploy("export", "wav2vec2", "--variant", "tiny", "-o", str(tmp_path / "missing" / "x.pte")),
        "does not exist",
    )


def test_weights_directory_of_another_model(tmp_path):
    from transformers import BertConfig

    BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8).save_pretrained(
        tmp_path / "bert"
    )
    result = audiodeploy("export", "wav2vec2", "--weights", str(tmp_path / "bert"), "-o", str(tmp_path / "x.pte"))
    assert_clean_error(result, "bert")
    assert not (tmp_path / "x.pte").exists()


def test_missing_input_file(asr_model, tmp_path):
    assert_clean_error(audiodeploy("run", str(asr_model), str(tmp_path / "nope.wav")), "no such file")


def test_non_audio_input_file(asr_model, tmp_path):
    (tmp_path / "notes.wav").write_text("this is not audio")
    assert_clean_error(audiodeploy("run", str(asr_model), str(tmp_path / "notes.wav")), "not a readable audio file")


def test_empty_audio(asr_model, tmp_path):
    soundfile.write(str(tmp_path / "empty.wav"), np.zeros((0,), dtype=np.float32), 16000)
    assert_clean_error(audiodeploy("run", str(asr_model), str(tmp_path / "empty.wav")), "empty")


def test_a_recording_longer_than_the_program_is_transcribed_in_windows(asr_model, tmp_path):
    wav = write_tone(tmp_path / "long.wav", 10.0, sample_rate=16000, channels=1)  # five times the longest input
    result = audiodeploy("run", str(asr_model), str(wav), "-o", str(tmp_path / "t.txt"))
    assert result.returncode == 0, result.stderr
    # nothing but the transcript and why it is random: no library warnings, no runtime logs
    assert result.stderr.splitlines() == [
        "note: the program has synthetic weights (exported without --weights): its output is meaningless"
    ]
    assert result.stdout.strip() == (tmp_path / "t.txt").read_text().strip()


def test_corrupt_program(asr_model, tmp_path):
    broken = tmp_path / "w.pte"
    broken.write_bytes(asr_model.read_bytes()[:1000])
    (tmp_path / "w.json").write_text(asr_model.with_suffix(".json").read_text())
    assert_clean_error(
        audiodeploy("run", str(broken), str(write_tone(tmp_path / "a.wav", 1.0))), "truncated", "export it again"
    )
    assert_clean_error(audiodeploy("inspect", str(broken)), "truncated")


def test_foreign_file_as_program(tmp_path):
    foreign = tmp_path / "model.pte"
    foreign.write_bytes(b"PK\x03\x04 a zip file, not a program" * 20)
    assert_clean_error(audiodeploy("inspect", str(foreign)), "not an ExecuTorch program", "zip")


def test_int8_options_that_do_not_go_together_are_refused_before_any_work(tmp_path):
    wav = write_tone(tmp_path / "a.wav", 0.5, sample_rate=16000, channels=1)
    for args, words in [
        (("--calibrate", str(wav)), "apply to quantized exports"),
        (("--sensitivity",), "apply to quantized exports"),
        (("--quantize", "int4"), "cannot be quantized as 'int4'"),
        (("--quantize", "int8-dynamic", "--calibrate", str(wav)), "is for int8-static"),
        (("--quantize", "int8-static", "--calibrate", str(tmp_path / "missing")), "no such file"),
    ]:
        result = audiodeploy("export", "wav2vec2", "--variant", "tiny", *args, "-o", str(tmp_path / "x.pte"))
        assert_clean_error(result, *words)
        assert "building" not in result.stderr
    assert_clean_error(
        audiodeploy(
            "export", "univnet", "--variant", "tiny", "--quantize", "int8-static", "-o", str(tmp_path / "x.pte")
        ),
        "cannot be quantized",
    )
