"""Where `run` and `export` write: a device node, a pipe or a symlink given as -o stays what it is; an extension that
names another kind of file is refused; temporaries a killed run left behind are cleaned up. Device nodes are made
in the test's directory (the /dev/null device, 1:3), never a real /dev entry touched."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile

from tests.cli import OFFLINE, assert_clean_error, audiodeploy, snapshot, write_tone


@pytest.fixture()
def mel(vocoder_model, tmp_path) -> Path:
    """A short mel spectrogram the tiny vocoder takes, in a directory of its own (outputs go to `tmp_path`)."""
    bins = json.loads(vocoder_model.with_suffix(".json").read_text())["model"]["input"]["feature_size"]
    directory = tmp_path / "in"
    directory.mkdir(exist_ok=True)
    np.save(directory / "mel.npy", np.zeros((30, bins), dtype=np.float32))
    return directory / "mel.npy"


@pytest.fixture()
def speech(tmp_path) -> Path:
    directory = tmp_path / "in"
    directory.mkdir(exist_ok=True)
    return write_tone(directory / "speech.wav", 0.5, sample_rate=16000, channels=1)


@pytest.fixture()
def private_tmp(tmp_path) -> tuple[Path, dict[str, str]]:
    """A TMPDIR of the test's own and the environment that points the command at it."""
    directory = tmp_path / "tmpdir"
    directory.mkdir()
    return directory, {**OFFLINE, "TMPDIR": str(directory)}


def null_device(path: Path) -> Path:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# --- a character device ------------------------------------------------------------------------------------------


def test_run_writes_a_transcript_through_a_character_device_and_keeps_the_node(
    asr_model, speech, tmp_path, private_tmp
):
    node = null_device(tmp_path / "n")
    result = audiodeploy("run", str(asr_model), str(speech), "-o", str(node), env=private_tmp[1])
    assert result.returncode == 0, result.stderr
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert os.lstat(node).st_rdev == os.makedev(1, 3)
    assert names(tmp_path) == ["in", "n", "tmpdir"]
    assert names(private_tmp[0]) == []


def test_run_streams_a_wav_through_a_character_device_and_leaves_no_temporary(
    vocoder_model, mel, tmp_path, private_tmp
):
    node = null_device(tmp_path / "n")
    result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(node), env=private_tmp[1])
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert names(tmp_path) == ["in", "n", "tmpdir"]
    assert names(private_tmp[0]) == []  # the wav went through a temporary here, removed once copied


def test_export_refuses_a_character_device_before_building(tmp_path):
    node = null_device(tmp_path / "m.pte")
    result = audiodeploy("export", "wav2vec2", "--variant", "tiny", "--seconds", "0.5", "-o", str(node))
    assert_clean_error(result, "m.pte", "not a file", "file name")
    assert "building" not in result.stderr
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert names(tmp_path) == ["m.pte"]


# --- a FIFO ------------------------------------------------------------------------------------------------------


def test_run_streams_a_whole_wav_into_a_fifo_with_a_reader(vocoder_model, mel, tmp_path, private_tmp):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(fifo), env=private_tmp[1])
        received, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()
        reader.wait()
    assert result.returncode == 0, result.stderr
    samples = int(result.stdout.split(": ")[1].split(" samples")[0])
    (tmp_path / "copy.wav").write_bytes(received)
    assert soundfile.info(str(tmp_path / "copy.wav")).frames == samples > 0
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert names(private_tmp[0]) == []


def test_a_fifo_without_a_reader_is_refused_at_once(vocoder_model, mel, tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(fifo))
    assert_clean_error(result, "p", "no reader", "start its reader")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert names(tmp_path) == ["in", "p"]


def test_a_link_to_the_process_stdout_takes_the_transcript(asr_model, speech, tmp_path):
    # What `-o /dev/stdout` is, made in the test's directory: a link to the process's own standard output (a pipe).
    os.symlink("/proc/self/fd/1", tmp_path / "stdout")
    alone = audiodeploy("run", str(asr_model), str(speech))
    result = audiodeploy("run", str(asr_model), str(speech), "-o", str(tmp_path / "stdout"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == alone.stdout * 2  # written to -o, then printed
    assert os.readlink(tmp_path / "stdout") == "/proc/self/fd/1"


# --- a symlink ---------------------------------------------------------------------------------------------------


def test_run_replaces_a_symlinks_target_and_keeps_the_link(vocoder_model, mel, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "real.wav").write_bytes(b"previous")
    os.symlink("real.wav", out / "link.wav")
    result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(out / "link.wav"))
    assert result.returncode == 0, result.stderr
    assert os.readlink(out / "link.wav") == "real.wav"
    assert soundfile.info(str(out / "real.wav")).frames > 0
    assert names(out) == ["link.wav", "real.wav"]


# --- what no file may replace ------------------------------------------------------------------------------------


def test_run_refuses_a_socket_before_any_work(asr_model, speech, tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "s"))
    try:
        result = audiodeploy("run", str(asr_model), str(speech), "-o", str(tmp_path / "s"))
    finally:
        server.close()
    assert_clean_error(result, "is a socket", "file name")
    assert stat.S_ISSOCK(os.lstat(tmp_path / "s").st_mode)


# --- extensions --------------------------------------------------------------------------------------------------


def test_a_vocoder_refuses_to_write_its_wav_under_a_text_name(vocoder_model, mel, tmp_path):
    result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(tmp_path / "x.txt"))
    assert_clean_error(result, "x.txt", "vocoder writes a wav", "x.wav")
    assert names(tmp_path) == ["in"]


@pytest.mark.parametrize("name", ["x.wav", "x.FLAC", "x.npy"])
def test_a_speech_recognizer_refuses_to_write_text_under_an_audio_name(asr_model, speech, tmp_path, name):
    result = audiodeploy("run", str(asr_model), str(speech), "-o", str(tmp_path / name))
    assert_clean_error(result, name, "transcript as text", "x.txt")
    assert names(tmp_path) == ["in"]


def test_a_transcript_takes_a_name_without_extension(asr_model, speech, tmp_path):
    result = audiodeploy("run", str(asr_model), str(speech), "-o", str(tmp_path / "transcript"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "transcript").read_text() == result.stdout


# --- temporaries a killed run left -------------------------------------------------------------------------------


def test_a_dead_runs_temporary_is_removed_and_nothing_else(vocoder_model, mel, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pid = dead_pid()
    stale = f".out.wav.{pid}.abcd1234.tmp"
    kept = [
        f".out.wav.{os.getpid()}.abcd1234.tmp",  # its writer (this test) is alive
        f".out.wav.{pid}.abcd1234.tmp.keep",  # not our naming
        ".out.wav.abcd1234.tmp",  # no pid: whose it is cannot be known
        f".other.wav.{pid}.abcd1234.tmp",  # another target's
        f"out.wav.{pid}.abcd1234.tmp",
    ]
    for name in [stale, *kept]:
        (out / name).write_bytes(b"partial")
    result = audiodeploy("run", str(vocoder_model), str(mel), "-o", str(out / "out.wav"))
    assert result.returncode == 0, result.stderr
    assert names(out) == sorted([*kept, "out.wav"])
    assert snapshot(out)[kept[0]] == b"partial"
