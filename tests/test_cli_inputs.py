"""What a user gives the command line that is not what it claims to be (weights, a config.json, a cache
directory, windows), and what a new user needs told: every answer one line naming the problem and the remedy."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from audiodeploy.program.description import program_digest
from tests.cli import OFFLINE, assert_clean_error, audiodeploy, audiodeploy_importing, write_tone

TINY_WAV2VEC2 = ("export", "wav2vec2", "--variant", "tiny")

# torch's weights-only unpickler reads LONG_BINGET of a memo entry that was never put: `KeyError: 279025011`,
# what random bytes from a failed download give.
KEY_ERROR_BYTES = b"\x80\x02j\x73\x95\xa1\x10."


class _RunsCode:
    """Pickles as a call to os.system: what a malicious checkpoint holds."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def _truncated_torch_save() -> bytes:
    buffer = io.BytesIO()
    torch.save({"generator": {"conv_pre.bias": torch.zeros(1000)}}, buffer)
    return buffer.getvalue()[: len(buffer.getvalue()) // 2]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A tiny wav2vec2 saved with save_pretrained: config.json and model.safetensors."""
    from audiodeploy import recipes

    directory = tmp_path_factory.mktemp("pretrained")
    recipes.get("wav2vec2").build("tiny").module.model.save_pretrained(directory)
    assert (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()
    return directory


def _with_weights(pretrained: Path, tmp_path: Path, name: str, content: bytes) -> Path:
    """A save_pretrained-layout directory: the real config.json, and `content` as its only weights file."""
    directory = tmp_path / "weights"
    directory.mkdir()
    shutil.copy(pretrained / "config.json", directory / "config.json")
    (directory / name).write_bytes(content)
    return directory


def _assert_no_unsafe_advice(result) -> None:
    # torch suggests weights_only=False, which would run whatever code the file holds.
    assert "weights_only" not in result.stderr and "trusted source" not in result.stderr, result.stderr


# --- weights that are not what they claim (class 5) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("model.safetensors", b"\xff" * 64, ("model.safetensors", "not a valid safetensors file", "header")),
        ("pytorch_model.bin", KEY_ERROR_BYTES, ("pytorch_model.bin", "not a PyTorch checkpoint", "KeyError")),
        ("pytorch_model.bin", _truncated_torch_save(), ("pytorch_model.bin", "truncated or corrupt", "zip archive")),
    ],
    ids=["corrupt-safetensors", "random-bin", "truncated-bin"],
)
def test_export_names_a_corrupt_weights_file_of_a_pretrained_directory(pretrained, tmp_path, name, content, words):
    weights = _with_weights(pretrained, tmp_path, name, content)
    result = audiodeploy(*TINY_WAV2VEC2, "--weights", str(weights), "-o", str(tmp_path / "w.pte"))
    assert_clean_error(result, *words, "download or save the weights again")
    _assert_no_unsafe_advice(result)
    assert not (tmp_path / "w.pte").exists()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        ("nothing", "not found: no such directory"),
        ("file", "is a file, but source 'transformers' loads a directory saved with save_pretrained()"),
        ("directory", "has no config.json"),
    ],
)
def test_a_mistyped_weights_path_is_refused_before_any_model_library_is_imported(tmp_path, make, words):
    """Within a second, not after the seconds that importing transformers and torch takes."""
    weights = tmp_path / "weights"
    if make == "file":
        weights.write_text("{}")
    elif make == "directory":
        weights.mkdir()
    result, imported = audiodeploy_importing(*TINY_WAV2VEC2, "--weights", str(weights))
    assert_clean_error(result, words)
    assert imported == [], imported


@pytest.mark.parametrize("recipe", [(), ("wav2vec2",)], ids=["from-config", "named"])
def test_export_names_a_damaged_config_or_missing_weights_of_a_local_directory(pretrained, tmp_path, recipe):
    """A local directory is never called "not a local directory": its config.json that is not JSON, and a
    config.json without weights beside it, are each named, with save_pretrained as the remedy."""
    broken = tmp_path / "broken"
    shutil.copytree(pretrained, broken)
    (broken / "config.json").write_text("{not json")
    result = audiodeploy("export", *recipe, "--weights", str(broken), "-o", str(tmp_path / "w.pte"))
    assert_clean_error(result, "config.json", "not a valid JSON file", "save_pretrained")
    assert "not a local directory" not in result.stderr
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(pretrained / "config.json", bare / "config.json")
    result = audiodeploy("export", *recipe, "--weights", str(bare), "-o", str(tmp_path / "w.pte"))
    assert_clean_error(result, "no file named model.safetensors", "save_pretrained")
    assert not (tmp_path / "w.pte").exists()


def test_a_pretrained_directory_whose_pickle_runs_code_is_refused_and_the_code_never_runs(pretrained, tmp_path):
    marker = tmp_path / "ran"
    weights = _with_weights(pretrained, tmp_path, "pytorch_model.bin", pickle.dumps(_RunsCode(marker), protocol=2))
    result = audiodeploy(*TINY_WAV2VEC2, "--weights", str(weights), "-o", str(tmp_path / "w.pte"))
    assert_clean_error(result, "pytorch_model.bin", "holds code", "never runs", "system", "a source you trust")
    _assert_no_unsafe_advice(result)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (KEY_ERROR_BYTES, ("not a PyTorch checkpoint", "KeyError", "download or save the weights again")),
        (b"", ("not a PyTorch checkpoint", "EOFError")),
        (None, ("holds code", "never runs", "a source you trust")),
    ],
    ids=["random", "empty", "runs-code"],
)
def test_export_hifigan_names_an_unreadable_generator_checkpoint(tmp_path, content, words):
    marker = tmp_path / "ran"
    checkpoint = tmp_path / "generator.pt"
    checkpoint.write_bytes(pickle.dumps(_RunsCode(marker), protocol=2) if content is None else content)
    result = audiodeploy(
        "export", "hifigan", "--variant", "tiny-v3", "--weights", str(checkpoint), "-o", str(tmp_path / "h.pte")
    )
    assert_clean_error(result, "generator.pt", *words)
    _assert_no_unsafe_advice(result)
    assert not marker.exists()


# --- a config.json that does not fit its weights (class 10) -------------------------------------------------------


def test_a_config_json_of_other_sizes_names_the_parameters_that_differ(pretrained, tmp_path):
    weights = tmp_path / "weights"
    shutil.copytree(pretrained, weights)
    config = json.loads((weights / "config.json").read_text())
    config["intermediate_size"] *= 2
    (weights / "config.json").write_text(json.dumps(config))
    result = audiodeploy(*TINY_WAV2VEC2, "--weights", str(weights), "-o", str(tmp_path / "w.pte"))
    line = assert_clean_error(
        result, "do not fit their config.json", "the config.json beside the weights must be the one"
    )
    half, full = config["intermediate_size"] // 2, config["intermediate_size"]
    assert f"intermediate_dense.bias is ({half},) in the checkpoint, ({full},) in the model" in line
    assert line.count(" in the checkpoint") <= 3 and "more)" in line  # a few, not all six
    assert "above report" not in result.stderr


# --- windows (class 10) ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> Path:
    return write_tone(tmp_path_factory.mktemp("speech") / "speech.wav", 3.0, sample_rate=16000, channels=1)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (("--overlap", "0"), ("an overlap of 0 s", "at least 1", "give 0.02 to 1.98 s")),
        (("--window", "2", "--overlap", "1.999"), ("whole 20 ms frames (1.999 s is 2 s)", "give 0.02 to 1.98 s")),
        (("--window", "1", "--overlap", "1"), ("windows of 1 s", "less than the window", "give 0.02 to 0.98 s")),
    ],
)
def test_an_overlap_the_program_cannot_take_states_the_range_it_can(asr_model, speech, options, words):
    line = assert_clean_error(audiodeploy("run", str(asr_model), str(speech), *options), *words)
    assert "give less than the window" not in line


def test_the_largest_overlap_the_message_offers_is_taken(asr_model, speech):
    # 1.98 s is 99.00000000000001 frames of 20 ms in floats: it must not round up to the whole window.
    result = audiodeploy("run", str(asr_model), str(speech), "--window", "2", "--overlap", "1.98")
    assert result.returncode == 0, result.stderr


def test_a_vocoder_overlap_is_counted_in_its_hop(vocoder_model, tmp_path):
    mel = tmp_path / "mel.npy"
    np.save(mel, np.zeros((200, 80), dtype=np.float32))
    result = audiodeploy("run", str(vocoder_model), str(mel), "--overlap", "1", "-o", str(tmp_path / "out.wav"))
    # 22.05 kHz, hop 256: frames of 11.6 ms. The program takes up to 87 frames (1.01 s), 1 s rounds up to all 87,
    # and at most 86 (998 ms) can overlap.
    assert_clean_error(result, "windows of 1.01 s", "whole 11.6 ms frames (1 s is 1.01 s)", "give 0 to 0.998 s")


# --- the cache directory (class 10) ---------------------------------------------------------------------------------


def test_a_cache_directory_that_is_a_file_is_named_once_and_the_run_goes_on(asr_model, speech, tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    result = audiodeploy("run", str(asr_model), str(speech), env={**OFFLINE, "AUDIODEPLOY_CACHE_DIR": str(blocked)})
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "AUDIODEPLOY_CACHE_DIR" in line]
    assert len(warned) == 1, result.stderr
    assert f"AUDIODEPLOY_CACHE_DIR={blocked} cannot be written (Not a directory)" in warned[0]
    assert "point AUDIODEPLOY_CACHE_DIR at a writable directory, or unset it" in warned[0]
    assert "Traceback" not in result.stderr
    assert blocked.read_text() == ""


# --- what a new user is told ------------------------------------------------------------------------------------------


def test_run_says_when_the_program_has_synthetic_weights(asr_model, speech):
    result = audiodeploy("run", str(asr_model), str(speech))
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: the program has synthetic weights (exported without --weights): its output is meaningless"]
    assert result.stdout.strip()  # the transcript still comes, on stdout


def test_list_hides_the_tiny_variants_and_says_how_to_show_them():
    plain = audiodeploy("list")
    assert plain.returncode == 0, plain.stderr
    wav2vec2 = plain.stdout.split("wav2vec2:", 1)[1].splitlines()[1]
    assert "tiny" not in wav2vec2
    assert "`audiodeploy list --all` shows them" in plain.stdout
    every = audiodeploy("list", "--all")
    assert every.returncode == 0, every.stderr
    wav2vec2 = every.stdout.split("wav2vec2:", 1)[1].splitlines()[1]
    assert "base (default)" in wav2vec2 and "tiny (test size)" in wav2vec2
    assert "list --all" not in every.stdout


def test_inspect_reads_the_program_without_loading_it_and_load_loads_it(asr_model, tmp_path):
    """A program naming a backend the runtime does not have: its header, flatbuffer and sidecar are fine, so
    inspect describes it; only loading it fails, so only --load says so."""
    buffer = asr_model.read_bytes()
    assert buffer.count(b"XnnpackBackend") >= 1
    damaged = buffer.replace(b"XnnpackBackend", b"XnnpackBackenX")
    program = tmp_path / "w.pte"
    program.write_bytes(damaged)
    sidecar = json.loads(asr_model.with_suffix(".json").read_text())
    sidecar["program_sha256"] = program_digest(damaged)
    program.with_suffix(".json").write_text(json.dumps(sidecar))

    described = audiodeploy("inspect", str(program))
    assert described.returncode == 0, described.stderr
    assert "XnnpackBackenX" in described.stdout and "weights: synthetic" in described.stdout
    assert "loaded in ExecuTorch's runtime" not in described.stdout

    assert_clean_error(audiodeploy("inspect", "--load", str(program)), "w.pte")
    loaded = audiodeploy("inspect", "--load", str(asr_model))
    assert loaded.returncode == 0, loaded.stderr
    assert "loaded in ExecuTorch's runtime: forward" in loaded.stdout


def test_inspect_without_load_still_refuses_a_truncated_program(asr_model, tmp_path):
    truncated = tmp_path / "w.pte"
    truncated.write_bytes(asr_model.read_bytes()[:1000])
    assert_clean_error(audiodeploy("inspect", str(truncated)), "truncated", "export it again")
    assert_clean_error(audiodeploy("inspect", str(tmp_path / "missing.pte")), "no such file", "audiodeploy export")


def test_a_vocoder_without_o_writes_beside_its_input_as_the_readme_says(vocoder_model, tmp_path):
    mel = tmp_path / "speech.npy"
    np.save(mel, np.zeros((40, 80), dtype=np.float32))
    result = audiodeploy("run", str(vocoder_model), str(mel))
    assert result.returncode == 0, result.stderr
    written = tmp_path / "speech.vocoded.wav"
    assert written.is_file() and soundfile.info(str(written)).frames == 40 * 256
    assert "speech.vocoded.wav" in Path(__file__).parents[1].joinpath("README.md").read_text()
