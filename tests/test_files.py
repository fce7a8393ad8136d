"""The atomic writers of `audiodeploy._files` on targets that are not regular files, and their temporaries.
Device nodes are made in the test's directory, never a real /dev entry touched."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from pathlib import Path

import pytest

from audiodeploy._files import (
    OutputPathError,
    atomic_output,
    atomic_write_bytes,
    atomic_write_files,
    check_writable,
)


def device(path: Path, minor: int = 3) -> Path:
    """A character device node of the memory driver: minor 3 is /dev/null's, 7 /dev/full's."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
    return path


def test_a_write_to_a_character_device_goes_through_it(tmp_path):
    node = device(tmp_path / "n")
    atomic_write_bytes(node, b"data")
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert os.listdir(tmp_path) == ["n"]


def test_a_full_device_fails_the_write_naming_it_and_stays_a_device(tmp_path):
    node = device(tmp_path / "full", minor=7)
    with pytest.raises(OSError) as failure:
        atomic_write_bytes(node, b"data")
    assert failure.value.errno == errno.ENOSPC and failure.value.filename == str(node)
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_a_program_and_its_sidecar_are_not_written_to_a_device(tmp_path):
    node = device(tmp_path / "m.pte")
    with pytest.raises(OutputPathError, match="written together as files"):
        atomic_write_files({node: b"program", tmp_path / "m.json": b"{}"})
    with pytest.raises(OutputPathError, match="not a file"):
        check_writable(node, streams=False)
    assert os.listdir(tmp_path) == ["m.pte"]


def test_a_fifo_without_a_reader_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="no reader"):
        atomic_write_bytes(fifo, b"data")
    with pytest.raises(OutputPathError, match="no reader"), atomic_output(fifo):
        pytest.fail("the work started before the pipe was found to have no reader")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_stays_a_link_and_its_target_is_replaced(tmp_path):
    (tmp_path / "real").write_bytes(b"old")
    os.symlink("real", tmp_path / "link")
    atomic_write_bytes(tmp_path / "link", b"new")
    with atomic_output(tmp_path / "link") as temporary:
        temporary.write_bytes(b"streamed")
    assert os.readlink(tmp_path / "link") == "real"
    assert (tmp_path / "real").read_bytes() == b"streamed"
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_a_symlink_loop_and_a_directory_are_refused(tmp_path):
    os.symlink("loop", tmp_path / "loop")
    with pytest.raises(OutputPathError, match="symbolic links"):
        check_writable(tmp_path / "loop")
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError, match="is a directory"):  # an OSError, as the rename would raise
        atomic_write_bytes(tmp_path / "d", b"data")


def test_temporaries_are_named_after_their_writer(tmp_path):
    with atomic_output(tmp_path / "out.wav") as temporary:
        assert temporary.name.startswith(f".out.wav.{os.getpid()}.") and temporary.name.endswith(".tmp")
    assert os.listdir(tmp_path) == ["out.wav"]


def test_only_a_dead_writers_temporaries_for_the_same_target_are_removed(tmp_path):
    child = subprocess.Popen(["true"])
    child.wait()
    stale = [f".out.wav.{child.pid}.abcd_123.tmp", f".out.wav.{child.pid}.abcd_123.probe"]
    kept = [f".out.wav.{os.getpid()}.abcd_123.tmp", f".out.wav.{child.pid}.abc.tmp~", f".out.wav.x{child.pid}.abc.tmp"]
    kept += [f".out.wav.{child.pid}.tmp", f".other.wav.{child.pid}.abcd_123.tmp"]
    for name in stale + kept:
        (tmp_path / name).write_bytes(b"partial")
    atomic_write_bytes(tmp_path / "out.wav", b"data")
    assert sorted(os.listdir(tmp_path)) == sorted([*kept, "out.wav"])
