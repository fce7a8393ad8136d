"""`Program`: what is not a loadable program is a one-line `ProgramLoadError`, inputs are checked, loading is quiet."""

from __future__ import annotations

import logging
import os
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import soundfile
import torch
from torch.export import Dim

import audiodeploy
from audiodeploy.runtime import Program, ProgramInputError, ProgramLoadError, probe, verdicts
from audiodeploy.runtime.program import ProgramRunError, TensorSpec, mark_verified
from audiodeploy.runtime.pte_check import GIVE_PTE


class ConvLinear(torch.nn.Module):
    """(1, 1, T) -> (1, T - 2, 3): a Conv1d and a Linear, one XNNPACK delegate."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, 3)
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.conv(x).transpose(1, 2))


@pytest.fixture(scope="module")
def module() -> ConvLinear:
    torch.manual_seed(0)
    return ConvLinear().eval()


@pytest.fixture(scope="module")
def static_pte(module, tmp_path_factory):
    """The program at the fixed shape (1, 1, 32)."""
    return audiodeploy.lower(module, (torch.randn(1, 1, 32),)).save(tmp_path_factory.mktemp("static") / "static.pte")


@pytest.fixture(scope="module")
def dynamic_pte(module, tmp_path_factory):
    """The program for lengths 8..64."""
    lowered = audiodeploy.lower(module, (torch.randn(1, 1, 32),), dynamic_shapes=({2: Dim("t", min=8, max=64)},))
    return lowered.save(tmp_path_factory.mktemp("dynamic") / "dynamic.pte")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test with its own verdict cache, empty."""
    monkeypatch.setenv("AUDIODEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(verdicts, "_KNOWN_TO_LOAD", set())


def load_error(path, *args) -> str:
    with pytest.raises(ProgramLoadError) as error:
        Program.load(path, *args)
    message = str(error.value)
    assert "\n" not in message
    return message


# --- files that are not a loadable program ----------------------------------------------------------------


def test_wav_file_is_named_as_audio_not_a_program(tmp_path):
    path = tmp_path / "speech.wav"
    soundfile.write(path, np.zeros(1600, dtype=np.float32), 16000)
    message = load_error(path)
    assert message.startswith(f"{path} is not an ExecuTorch program: it starts like a RIFF/WAVE audio file")
    assert "give the .pte written by `audiodeploy export`" in message


def test_zip_file_is_named_as_a_zip_archive(tmp_path):
    path = tmp_path / "model.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data.pkl", b"weights")
    assert "it starts like a zip archive" in load_error(path)


def test_empty_file_is_called_empty(tmp_path):
    path = tmp_path / "empty.pte"
    path.write_bytes(b"")
    assert load_error(path) == f"{path} is empty, not an ExecuTorch program; {GIVE_PTE}"


def test_directory_missing_file_and_undecodable_name_are_load_errors(tmp_path):
    assert load_error(tmp_path) == f"{tmp_path} is a directory, not a program; {GIVE_PTE}"
    assert load_error(tmp_path / "missing.pte") == f"{tmp_path / 'missing.pte'}: no such file; {GIVE_PTE}"
    undecodable = os.fsencode(tmp_path) + b"/\xff\xfe.pte"
    message = load_error(undecodable)
    assert "\\xff\\xfe.pte: no such file" in message
    message.encode("utf-8")  # printable as it is


def test_unreadable_file_is_a_load_error(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = tmp_path / "locked.pte"
    path.write_bytes(b"x" * 64)
    path.chmod(0)
    assert "permission denied" in load_error(path)


def test_other_files_people_give_by_mistake(tmp_path):
    cases = {
        "pointer.pte": (b"version https://git-lfs.github.com/spec/v1\noid sha256:0\n", "a Git LFS pointer"),
        "sidecar.pte": (b'{"model": {}}', "JSON text"),
        "old.pte": (b"\x10\x00\x00\x00ET11" + bytes(64), "another format (ET11"),
        "noise.pte": (bytes(range(200, 256)) * 4, "no ET12 identifier at bytes 4-7"),
    }
    for name, (content, words) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert words in load_error(tmp_path / name), name


def test_truncated_program_says_how_many_bytes_it_lacks(tmp_path, dynamic_pte):
    buffer = dynamic_pte.read_bytes()
    cut = tmp_path / "cut.pte"
    cut.write_bytes(buffer[: len(buffer) // 2])
    assert load_error(cut) == (
        f"{cut} is truncated: its header says {len(buffer)} bytes, the file has {len(buffer) // 2}; "
        "export it again (`audiodeploy export`)"
    )
    cut.write_bytes(buffer[:100])
    assert "is truncated: its header says the program is" in load_error(cut)


def test_header_claiming_more_or_fewer_bytes_than_the_file_has(tmp_path, dynamic_pte):
    buffer = bytearray(dynamic_pte.read_bytes())
    (data_size,) = struct.unpack_from("<Q", buffer, 32)
    struct.pack_into("<Q", buffer, 32, data_size + 100)
    longer = tmp_path / "longer.pte"
    longer.write_bytes(buffer)
    assert f"is truncated: its header says {len(buffer) + 100} bytes, the file has {len(buffer)}" in load_error(longer)
    appended = tmp_path / "appended.pte"
    appended.write_bytes(dynamic_pte.read_bytes() + b"junk")
    assert f"has {len(buffer) + 4} bytes where its header says {len(buffer)}" in load_error(appended)


def test_segment_outside_the_file_is_found_before_the_runtime_sees_it(dynamic_pte):
    from audiodeploy.runtime.pte_check import check_program_bytes

    buffer = dynamic_pte.read_bytes()
    layout = check_program_bytes(buffer, "p")
    (data_size,) = struct.unpack_from("<Q", buffer, 32)
    # Move the extended header's view of the file so that the last segment no longer fits.
    shrunk = bytearray(buffer[: len(buffer) - 64])
    struct.pack_into("<Q", shrunk, 32, data_size - 64)
    with pytest.raises(ProgramLoadError, match=r"p is a damaged ExecuTorch program \(segment \d+ spans bytes"):
        Program(bytes(shrunk), origin="p")
    assert layout.method_names == ("forward",)


def test_probe_turns_a_runtime_crash_into_a_load_error():
    # Bytes 4..8 that are not UTF-8 abort ExecuTorch 1.5.1 in a log line: the checks refuse them before the
    # runtime sees them, so here the probe is given them directly.
    wav_like = b"RIFF\xa4\x0c\x00\x00WAVEfmt " + bytes(64)
    crashed = r"^the ExecuTorch runtime crashed while loading x\.wav \(SIGABRT\): the file is corrupt; export it again$"
    with pytest.raises(ProgramLoadError, match=crashed):
        probe.probe_program(wav_like, "x.wav", None)


# --- a valid program ------------------------------------------------------------------------------------------


def test_valid_program_loads_runs_and_prints_nothing(static_pte, module, capfd):
    x = torch.randn(1, 1, 32)
    program = Program.load(static_pte)
    outputs = program.run((x,))
    assert program.method_names == ["forward"]
    torch.testing.assert_close(outputs[0], module(x).detach(), atol=1e-5, rtol=1e-4)
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_first_load_of_a_process_prints_nothing_and_logs_cpuinfo_at_debug(static_pte, tmp_path):
    # The runtime's five [cpuinfo_utils.cpp:...] lines come with the first XNNPACK load of a process.
    script = (
        "import io, logging, sys\n"
        "log = io.StringIO()\n"
        "logging.basicConfig(stream=log, level=logging.DEBUG, format='%(name)s %(message)s')\n"
        "from audiodeploy.runtime import Program\n"
        "Program.load(sys.argv[1])\n"
        "open(sys.argv[2], 'w').write(log.getvalue())\n"
    )
    logged = tmp_path / "log.txt"
    environment = {**os.environ, "AUDIODEPLOY_CACHE_DIR": str(tmp_path / "cache")}
    child = subprocess.run(
        [sys.executable, "-c", script, str(static_pte), str(logged)], capture_output=True, text=True, env=environment
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout == "" and child.stderr == ""
    assert "audiodeploy.runtime executorch: [cpuinfo_utils.cpp:" in logged.read_text()


def test_refused_program_prints_nothing_and_logs_the_runtime_at_debug(static_pte, tmp_path, capfd, caplog):
    buffer = bytearray(static_pte.read_bytes())
    position = buffer.index(b"XnnpackBackend")
    buffer[position : position + 7] = b"Missing"  # a backend this runtime does not have
    renamed = tmp_path / "renamed.pte"
    renamed.write_bytes(buffer)
    with caplog.at_level(logging.DEBUG, logger="audiodeploy.runtime"):
        message = load_error(renamed)
    assert "MissingBackend is not registered" in message and "lacks the backend" in message
    assert any(r.name == "audiodeploy.runtime" and r.message.startswith("executorch: ") for r in caplog.records)
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


def test_specs_give_dtypes_and_upper_bounds(dynamic_pte, static_pte):
    program = Program.load(dynamic_pte)
    assert program.input_specs() == [TensorSpec(torch.float32, (1, 1, 64), 6)]
    assert program.output_specs() == [TensorSpec(torch.float32, (1, 62, 3), 6)]
    assert str(program.input_specs()[0]) == "float32 [1, 1, 64]"
    assert Program.load(static_pte).input_specs("forward")[0].sizes == (1, 1, 32)
    with pytest.raises(ProgramInputError, match="has no method 'encode'; it has forward"):
        program.input_specs("encode")


def test_dynamic_program_runs_below_its_upper_bound(dynamic_pte, module):
    x = torch.randn(1, 1, 20)
    torch.testing.assert_close(Program.load(dynamic_pte).run([x])[0], module(x).detach(), atol=1e-5, rtol=1e-4)


# --- inputs ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        ((), r"got 0 input\(s\); it takes 1: float32 \[1, 1, 64\]"),
        ((torch.zeros(1, 1, 20), torch.zeros(1)), r"got 2 input\(s\)"),
        (
            (torch.zeros(1, 1, 20, dtype=torch.float64),),
            r"input 0 is float64 \[1, 1, 20\]; .* takes float32 \[1, 1, 64\] as input 0 "
            r"\(convert it: `\.to\(torch\.float32\)`\)",
        ),
        ((torch.zeros(1, 20),), r"input 0 is float32 \[1, 20\], 2 axes; .* 3 axes"),
        ((torch.zeros(1, 1, 65),), r"axis 2 has 65, the program takes at most 64"),
        ((torch.full((1, 1, 20), float("nan")),), r"with 20 NaN and 0 infinite value\(s\)"),
        ((torch.tensor([[[1.0, float("inf"), -float("inf")] * 4]]),), r"with 0 NaN and 8 infinite value\(s\)"),
        ((torch.zeros(1, 1, 20, dtype=torch.complex64),), r"input 0 is complex64 \[1, 1, 20\]: complex tensors"),
        (([[0.0] * 20],), r"input 0 is a list, not a tensor"),
        (torch.zeros(1, 1, 20), r"give the inputs as a sequence \(tuple or list\) of tensors, not a Tensor"),
    ],
)
def test_inputs_the_program_does_not_take_are_input_errors(dynamic_pte, inputs, words):
    program = Program.load(dynamic_pte)
    with pytest.raises(ProgramInputError, match=words) as error:
        program.run(inputs)
    assert "\n" not in str(error.value) and str(dynamic_pte) in str(error.value)


def test_static_program_refuses_a_smaller_input_in_one_line(static_pte):
    refused = r"\('forward'\) refused its inputs \(.*\); it takes float32 \[1, 1, 32\]"
    with pytest.raises(ProgramInputError, match=refused) as error:
        Program.load(static_pte).run((torch.zeros(1, 1, 16),))
    assert "\n" not in str(error.value)


def test_failure_while_running_is_a_one_line_run_error(static_pte):
    class FailingMethod:
        def set_inputs(self, inputs):
            pass

        def execute(self):
            raise RuntimeError("method->execute() failed with error 0x1")

    program = Program.load(static_pte)
    program._loaded.methods["forward"] = FailingMethod()
    failed = r"\('forward'\) failed while running \(Internal\); if the inputs are right"
    with pytest.raises(ProgramRunError, match=failed):
        program.run((torch.zeros(1, 1, 32),))


# --- external data, the verdict cache ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def external_data_program(tmp_path_factory):
    """A Linear whose weights are in a .ptd (ExecuTorch's `external_constants`), no delegate."""
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 8).eval()
    x = torch.randn(2, 8)
    manager = to_edge_transform_and_lower(torch.export.export(linear, (x,))).to_executorch(
        ExecutorchBackendConfig(external_constants=True)
    )
    directory = tmp_path_factory.mktemp("external")
    manager.write_tensor_data_to_file(str(directory))
    (ptd,) = directory.glob("*.ptd")
    pte = directory / "linear.pte"
    pte.write_bytes(manager.buffer)
    return pte, ptd, linear, x


def test_program_with_external_data_needs_its_ptd(external_data_program):
    pte, ptd, linear, x = external_data_program
    torch.testing.assert_close(Program.load(pte, ptd).run((x,))[0], linear(x).detach())
    torch.testing.assert_close(Program(pte.read_bytes(), data=ptd.read_bytes()).run((x,))[0], linear(x).detach())
    assert "its constants are in a .ptd file: give that file too" in load_error(pte)
    assert "is an ExecuTorch .ptd data file (a program's constants), not the program" in load_error(ptd)
    assert "is an ExecuTorch program (.pte), not its data" in load_error(pte, pte)


def test_a_program_is_probed_once_and_trusted_bytes_never(static_pte, monkeypatch, tmp_path):
    calls = []
    real_probe = probe.probe_program
    monkeypatch.setattr(probe, "probe_program", lambda *args: calls.append(args) or real_probe(*args))
    buffer = static_pte.read_bytes()
    Program(buffer)
    Program(buffer)
    assert len(calls) == 1
    assert len(list((tmp_path / "cache" / "verified-programs").iterdir())) == 1
    monkeypatch.setattr(verdicts, "_KNOWN_TO_LOAD", set())
    Program(buffer)  # from the cache on disk
    Program(buffer + b"", trusted=True)
    assert len(calls) == 1


def test_mark_verified_skips_the_probe_and_an_unwritable_cache_only_means_no_cache(static_pte, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(probe, "probe_program", lambda *args: calls.append(args))
    buffer = static_pte.read_bytes()
    mark_verified(buffer)
    monkeypatch.setattr(verdicts, "_KNOWN_TO_LOAD", set())
    Program(buffer)
    assert calls == []
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory would be")
    monkeypatch.setenv("AUDIODEPLOY_CACHE_DIR", str(blocked))
    monkeypatch.setattr(verdicts, "_KNOWN_TO_LOAD", set())
    Program(buffer)
    Program(buffer)  # remembered in memory
    assert len(calls) == 1
