"""Mistakes, bad input and interruptions through the command line: an exit status, one line, no traceback, and the
user's files exactly as they were, with no temporary file left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.cli import OFFLINE, assert_clean_error, audiodeploy, snapshot, write_tone

TINY_EXPORT = ("export", "wav2vec2", "--variant", "tiny", "--min-seconds", "0.5", "--max-seconds", "1")


@pytest.fixture()
def previous_pair(asr_model, tmp_path) -> Path:
    """A directory holding a program and its sidecar from an earlier export, which nothing may damage."""
    shutil.copy(asr_model, tmp_path / "model.pte")
    shutil.copy(asr_model.with_suffix(".json"), tmp_path / "model.json")
    return tmp_path / "model.pte"


# --- a file that is not a program --------------------------------------------------------------------------------


def test_a_wav_given_as_the_program_is_one_line_not_an_abort(tmp_path):
    wav = write_tone(tmp_path / "speech.wav", 0.5, sample_rate=16000, channels=1)
    assert_clean_error(audiodeploy("inspect", str(wav)), "speech.wav", "audio")
    shutil.copy(wav, tmp_path / "speech.pte")
    (tmp_path / "speech.json").write_text("{}")
    assert_clean_error(audiodeploy("run", str(tmp_path / "speech.pte"), str(wav)), "speech.pte")


# --- usage mistakes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (("export", "wav2vec2", "--bogus"), "No such option: --bogus"),
        (("export", "wav2vec2", "--seconds", "two"), "Invalid value for '--seconds'"),
        (("run",), "Missing argument"),
        (("exprot", "wav2vec2"), "No such command 'exprot'"),
        (("bench", "wav2vec2", "--runs", "many"), "Invalid value for '--runs'"),
    ],
)
def test_a_usage_mistake_is_the_usual_short_usage_message(args, words):
    result = audiodeploy(*args)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert words in result.stderr and "Usage: audiodeploy" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 8, result.stderr


def test_help_list_and_usage_mistakes_import_neither_torch_nor_a_model_library():
    """What makes them answer at once (under a second): they never load the heavy libraries."""
    for args in (("--help",), ("list",), ("export", "--help"), ("export", "wav2vec2", "--bogus")):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "audiodeploy", *args],
            capture_output=True,
            text=True,
            env=OFFLINE,
        )
        imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
        assert not imported & {"torch", "executorch", "transformers", "torchaudio"}, (
            args,
            imported & {"torch", "transformers"},
        )


# --- interruptions -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_export_leaves_the_previous_program_and_no_temporary_file(previous_pair, stop):
    directory = previous_pair.parent
    before = snapshot(directory)
    process = subprocess.Popen(
        [sys.executable, "-m", "audiodeploy", *TINY_EXPORT, "-o", str(previous_pair)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=OFFLINE,
    )
    for line in process.stderr:  # the model is built: the lowering is under way
        if line.startswith("weights:"):
            break
    time.sleep(0.5)
    process.send_signal(stop)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + stop, stderr
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1 and ("interrupted" in stderr or "SIGTERM" in stderr), stderr
    assert snapshot(directory) == before


def test_a_signal_while_the_files_are_written_leaves_the_old_pair_whole(tmp_path):
    """The files are written to temporaries first; a stop signal then removes them and changes nothing."""
    (tmp_path / "m.pte").write_bytes(b"old program")
    (tmp_path / "m.json").write_bytes(b"old sidecar")
    script = f"""
        import signal, sys
        from pathlib import Path
        from audiodeploy import cli
        from audiodeploy._files import atomic_write_files
        signal.signal(signal.SIGTERM, cli._raise_interrupted)
        big = bytes(800 * 2**20)
        print("writing", flush=True)
        try:
            atomic_write_files({{Path({str(tmp_path / "m.pte")!r}): big, Path({str(tmp_path / "m.json")!r}): b"new"}})
        except cli.Interrupted:
            sys.exit(143)
    """
    process = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "writing"
    time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    files = snapshot(tmp_path)
    if process.returncode == 0:  # the write won the race: then both files are new
        assert files == {"m.json": b"new", "m.pte": bytes(800 * 2**20)}
    else:
        assert process.returncode == 143
        assert files == {"m.json": b"old sidecar", "m.pte": b"old program"}


# --- failed writes -----------------------------------------------------------------------------------------------


@pytest.fixture()
def small_disk(tmp_path):
    """A file system of 1.5 times the size of a program and its sidecar, holding them: no room for a second copy."""
    mount = tmp_path / "disk"
    mount.mkdir()
    yield mount
    subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_write_that_fails_on_a_full_disk_leaves_the_previous_program(asr_model, small_disk):
    pair = asr_model.stat().st_size + asr_model.with_suffix(".json").stat().st_size
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={pair * 3 // 2}", "tmpfs", str(small_disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here to fill ({mounted.stderr.strip()})")
    shutil.copy(asr_model, small_disk / "model.pte")
    shutil.copy(asr_model.with_suffix(".json"), small_disk / "model.json")
    before = snapshot(small_disk)
    # The quickest export (a tiny Vocos at one length: 4.5 MB, its inverse STFT's constants); any fails all the same.
    result = audiodeploy(
        "export", "vocos", "--variant", "tiny", "--seconds", "0.1", "-o", str(small_disk / "model.pte")
    )
    assert_clean_error(result, "model.pte", "No space left on device", "unchanged", status=1)
    assert snapshot(small_disk) == before


def test_a_sidecar_path_that_is_a_directory_is_refused_before_any_work(previous_pair):
    directory = previous_pair.parent
    (directory / "model.json").unlink()
    (directory / "model.json").mkdir()
    before = snapshot(directory)
    result = audiodeploy(*TINY_EXPORT, "-o", str(previous_pair))
    assert_clean_error(result, "model.json", "is a directory")
    assert "building" not in result.stderr  # found before the model was built
    assert snapshot(directory) == before


@pytest.mark.parametrize(
    "target, words",
    [
        ("/proc/model.pte", "cannot write /proc/model.pte"),
        ("missing-directory/model.pte", "does not exist"),
    ],
)
def test_an_unwritable_target_is_refused_before_any_work(tmp_path, target, words):
    result = audiodeploy(*TINY_EXPORT, "-o", target, cwd=tmp_path)
    assert_clean_error(result, words)
    assert "building" not in result.stderr


def test_a_file_name_that_is_not_utf8_is_refused_in_one_line(tmp_path):
    name = os.fsdecode(b"model-\xff.pte")
    result = audiodeploy(*TINY_EXPORT, "-o", name, cwd=tmp_path)
    assert_clean_error(result, "not valid UTF-8")
    assert list(tmp_path.iterdir()) == []


# --- outputs that would destroy inputs ---------------------------------------------------------------------------


def test_export_refuses_a_program_name_its_sidecar_would_overwrite(tmp_path):
    assert_clean_error(audiodeploy(*TINY_EXPORT, "-o", str(tmp_path / "m.json")), "sidecar would overwrite")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "output, words", [("model.pte", "the program"), ("model.json", "sidecar"), ("speech.wav", "the input")]
)
def test_run_refuses_an_output_that_would_overwrite_its_own_inputs(previous_pair, output, words):
    directory = previous_pair.parent
    write_tone(directory / "speech.wav", 0.5, sample_rate=16000, channels=1)
    before = snapshot(directory)
    result = audiodeploy("run", str(previous_pair), str(directory / "speech.wav"), "-o", str(directory / output))
    assert_clean_error(result, "would overwrite", words)
    assert snapshot(directory) == before


def test_bench_refuses_the_same_file_for_json_and_plot(tmp_path):
    result = audiodeploy(
        "bench", "wav2vec2", "--variant", "tiny", "--json", str(tmp_path / "r"), "--plot", str(tmp_path / "r")
    )
    assert_clean_error(result, "would overwrite")


# --- sidecars that do not belong to the program ------------------------------------------------------------------


def test_a_sidecar_of_another_model_is_one_line(previous_pair, vocoder_model, tmp_path):
    shutil.copy(vocoder_model.with_suffix(".json"), previous_pair.with_suffix(".json"))
    wav = write_tone(tmp_path / "speech.wav", 0.5, sample_rate=16000, channels=1)
    assert_clean_error(audiodeploy("run", str(previous_pair), str(wav)), "another program")
    assert_clean_error(audiodeploy("inspect", str(previous_pair)), "another program")


def test_a_sidecar_without_its_model_is_one_line(previous_pair, tmp_path):
    sidecar = previous_pair.with_suffix(".json")
    content = json.loads(sidecar.read_text())
    del content["model"]
    sidecar.write_text(json.dumps(content))
    wav = write_tone(tmp_path / "speech.wav", 0.5, sample_rate=16000, channels=1)
    assert_clean_error(audiodeploy("run", str(previous_pair), str(wav)), "field 'model'")


# --- input that is not finite ------------------------------------------------------------------------------------


def test_audio_with_nan_or_inf_is_refused(asr_model, tmp_path):
    samples = np.zeros(16000, dtype=np.float32)
    samples[8000] = np.inf
    soundfile.write(str(tmp_path / "inf.wav"), samples, 16000, subtype="FLOAT")
    assert_clean_error(audiodeploy("run", str(asr_model), str(tmp_path / "inf.wav")), "NaN or infinite", "0.50 s")


def test_a_mel_with_one_nan_writes_no_wav(vocoder_model, tmp_path):
    bins = json.loads(vocoder_model.with_suffix(".json").read_text())["model"]["input"]["feature_size"]
    mel = np.zeros((30, bins), dtype=np.float32)
    mel[12, 5] = np.nan
    np.save(tmp_path / "mel.npy", mel)
    result = audiodeploy("run", str(vocoder_model), str(tmp_path / "mel.npy"), "-o", str(tmp_path / "out.wav"))
    assert_clean_error(result, "NaN", "frame 12")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mel.npy"]


# --- quiet ------------------------------------------------------------------------------------------------------


def test_export_says_what_it_folded_in_one_line_and_every_fold_with_verbose(vocoder_model):
    printed = (vocoder_model.parent / "stdout.txt").read_text(), (vocoder_model.parent / "stderr.txt").read_text()
    assert "computed weight(s)" in printed[0] and " <- " not in printed[0]
    for noise in ("_pytree", "register_constant", "cpuinfo", "Warning", "W1"):
        assert noise not in "".join(printed), noise
    verbose = audiodeploy("-v", "inspect", str(vocoder_model))
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout.count(" <- ") > 5


def test_a_hub_id_without_a_network_fails_once_in_one_line(tmp_path):
    start = time.monotonic()
    result = audiodeploy(
        "export", "wav2vec2", "--weights", "facebook/wav2vec2-base-960h", "-o", str(tmp_path / "w.pte")
    )
    assert_clean_error(result, "facebook/wav2vec2-base-960h", "cannot be reached")
    assert time.monotonic() - start < 60
