"""The runner built for this machine: outputs against eager PyTorch and the Python runtime, its report, its
one-line errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
import torch

import audiodeploy
from audiodeploy.native import NativeError, RunOptions, run_runner
from audiodeploy.native import run as native_run
from audiodeploy.native.run import RunnerCpu, RunnerInput, RunnerOutput
from audiodeploy.runtime import Program
from tests.native.conftest import CHANNELS, MAX_LENGTH

REPORT_SCHEMA = (
    Path(__file__).resolve().parents[2] / "audiodeploy" / "program" / "schemas" / "runner-report.schema.json"
)

ATOL = 1e-5


def test_fp32_dynamic_length_matches_eager_and_the_python_runtime(host_runner, tiny_program):
    for length in (16, 40):
        x = torch.randn(1, CHANNELS, length)
        native = run_runner(host_runner, tiny_program.path, [x], RunOptions(iterations=2)).outputs[0]
        python = Program.load(tiny_program.path).run((x,))[0]
        torch.testing.assert_close(native, tiny_program.eager(x), atol=ATOL, rtol=0)
        torch.testing.assert_close(native, python, atol=ATOL, rtol=0)
        assert native.shape == (1, length, 5)


def test_report_has_load_time_latencies_memory_cpu_threads_and_shapes(host_runner, tiny_program, monkeypatch):
    printed = []

    def parse_report(stdout: str) -> native_run.RunnerReport:
        printed.append(stdout)  # the report as the runner printed it, before Python reads it
        return parse(stdout)

    parse = native_run.parse_report
    monkeypatch.setattr(native_run, "parse_report", parse_report)
    x = torch.randn(1, CHANNELS, 24)
    report = run_runner(host_runner, tiny_program.path, [x], RunOptions(warmup=2, iterations=3, threads=1)).report
    # What the C++ runner prints follows the checked-in schema generated from RunnerReport, and reads back as is.
    (document,) = (json.loads(text) for text in printed)
    jsonschema.Draft202012Validator(json.loads(REPORT_SCHEMA.read_text())).validate(document)
    assert report.to_dict() == document
    assert report.schema == "audiodeploy.runner/1"
    assert report.executorch_version.startswith(host_runner.executorch_version)
    assert report.method == "forward" and report.data is None
    assert report.load_ms.program > 0 and report.load_ms.method > 0
    assert report.load_ms.total == pytest.approx(report.load_ms.program + report.load_ms.method, abs=1e-3)
    assert report.warmup == 2 and report.iterations == 3
    assert len(report.latencies_ms) == 3 and all(latency > 0 for latency in report.latencies_ms)
    assert report.peak_rss_bytes > 1 << 20
    assert isinstance(report.cpu, RunnerCpu)
    assert report.cpu.architecture == "x86_64" and report.cpu.cores >= 1 and report.cpu.model
    assert report.threads == 1
    assert report.inputs == (RunnerInput(shape=(1, CHANNELS, 24), dtype="float32", source="file"),)
    assert report.outputs == (RunnerOutput(shape=(1, 24, 5), dtype="float32"),)


def test_seeded_fill_is_reproducible_and_zeros_fill_takes_the_method_bound(host_runner, tiny_program):
    first = run_runner(
        host_runner,
        tiny_program.path,
        options=RunOptions(fill="seeded", fill_shapes=[(1, CHANNELS, 8)], seed=3, iterations=1),
    )
    second = run_runner(
        host_runner,
        tiny_program.path,
        options=RunOptions(fill="seeded", fill_shapes=[(1, CHANNELS, 8)], seed=3, iterations=1),
    )
    torch.testing.assert_close(first.outputs[0], second.outputs[0], atol=0, rtol=0)
    zeros = run_runner(host_runner, tiny_program.path, options=RunOptions(fill="zeros", iterations=1))
    assert zeros.report.inputs == (RunnerInput(shape=(1, CHANNELS, MAX_LENGTH), dtype="float32", source="zeros"),)
    torch.testing.assert_close(
        zeros.outputs[0], tiny_program.eager(torch.zeros(1, CHANNELS, MAX_LENGTH)), atol=ATOL, rtol=0
    )


def test_outputs_are_written_with_a_manifest(host_runner, tiny_program, tmp_path):
    subprocess.run(
        [str(host_runner.executable), "--model", str(tiny_program.path), "--fill", "seeded", "--iterations", "1",
         "--output-dir", str(tmp_path / "out")],
        check=True, capture_output=True,
    )  # fmt: skip
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest == {
        "schema": "audiodeploy.runner.outputs/1",
        "outputs": [{"file": "output_0.bin", "shape": [1, MAX_LENGTH, 5], "dtype": "float32"}],
    }
    assert (tmp_path / "out" / "output_0.bin").stat().st_size == MAX_LENGTH * 5 * 4


def test_help_prints_usage_and_exits_zero(host_runner):
    done = subprocess.run([str(host_runner.executable), "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: audiodeploy-runner")


def _run(host_runner, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(host_runner.executable), *arguments], capture_output=True, text=True)


@pytest.fixture
def input_file(tmp_path) -> Path:
    path = tmp_path / "x.bin"
    torch.randn(1, CHANNELS, 16).numpy().tofile(path)
    return path


@pytest.mark.parametrize(
    ("case", "arguments", "status", "message"),
    [
        (
            "missing model",
            ["--model", "{tmp}/nope.pte", "--fill", "zeros"],
            1,
            "model file {tmp}/nope.pte does not exist",
        ),
        (
            "not a program",
            ["--model", "{x}", "--fill", "zeros"],
            1,
            "loading program {x} failed: Error::InvalidProgram",
        ),
        (
            "file size",
            ["--model", "{pte}", "--input", "{x}:1x4x15"],
            1,
            "has 256 bytes, shape 1x4x15 of float32 needs 240",
        ),
        ("rank", ["--model", "{pte}", "--input", "{x}:4x16"], 1, "input 0 of method 'forward' has rank 3"),
        ("above bound", ["--model", "{pte}", "--fill", "zeros", "--shape", "1x4x65"], 1, "is at most 1x4x64"),
        (
            "missing input",
            ["--model", "{pte}", "--input", "{tmp}/gone.bin:1x4x16"],
            1,
            "input file {tmp}/gone.bin does not exist",
        ),
        (
            "input count",
            ["--model", "{pte}", "--input", "{x}:1x4x16", "--input", "{x}:1x4x16"],
            1,
            "takes 1 input, got 2",
        ),
        ("no inputs", ["--model", "{pte}"], 1, "takes 1 input: give --input"),
        (
            "method",
            ["--model", "{pte}", "--fill", "zeros", "--method", "encode"],
            1,
            "has no method 'encode' (methods: forward)",
        ),
        ("bad flag", ["--model", "{pte}", "--fill", "zeros", "--frobnicate"], 2, "unknown option '--frobnicate'"),
        ("bad number", ["--model", "{pte}", "--fill", "zeros", "--threads", "two"], 2, "--threads is not an integer"),
        ("bad fill", ["--model", "{pte}", "--fill", "ones"], 2, "--fill expects zeros or seeded"),
        ("no model flag", ["--fill", "zeros"], 2, "--model is required"),
    ],
)
def test_failure_is_one_error_line_and_no_report(
    host_runner, tiny_program, input_file, tmp_path, case, arguments, status, message
):
    names = {"tmp": str(tmp_path), "x": str(input_file), "pte": str(tiny_program.path)}
    done = _run(host_runner, *(argument.format(**names) for argument in arguments))
    assert done.returncode == status, case
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert message.format(**names) in lines[0]


def test_python_side_raises_the_runners_message(host_runner, tiny_program):
    with pytest.raises(NativeError, match=r"host runner failed: input 0 of method 'forward' is at most 1x4x64"):
        run_runner(host_runner, tiny_program.path, [torch.randn(1, CHANNELS, 65)])
    with pytest.raises(NativeError, match="model file .* does not exist"):
        run_runner(host_runner, tiny_program.path.with_name("absent.pte"), options=RunOptions(fill="zeros"))


class SharedWeightChain(torch.nn.Module):
    """One 1 MiB weight read by `steps` GEMMs in a row, as an LSTM unrolled over its frames reads its recurrent one."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.linear = torch.nn.Linear(512, 512, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.steps):
            x = torch.tanh(self.linear(x))
        return x


def test_a_weight_many_gemms_read_is_packed_once(host_runner, tmp_path):
    """XNNPACK packs a weight once per operator unless its weight cache is on (the runner turns it on): forty GEMMs
    of one 1 MiB weight held 40 MiB of copies, and an unrolled LSTM 148 copies of its 4 MiB recurrent weight."""
    torch.manual_seed(0)
    x = torch.randn(1, 512)
    peaks = {}
    for steps in (1, 40):
        module = SharedWeightChain(steps).eval()
        path = audiodeploy.lower(module, (x,)).save(tmp_path / f"chain{steps}.pte")
        result = run_runner(host_runner, path, [x], RunOptions(iterations=1))
        torch.testing.assert_close(result.outputs[0], module(x).detach(), atol=ATOL, rtol=1e-4)
        peaks[steps] = result.report.peak_rss_bytes
    assert peaks[40] - peaks[1] < 10 << 20, peaks  # 39 more copies would be 39 MiB


class CodesToSignal(torch.nn.Module):
    """A codec decoder's shape of input: integer codes looked up in a table, scaled by a float input."""

    def __init__(self) -> None:
        super().__init__()
        self.codebook = torch.nn.Embedding(16, 8)
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.linear(self.codebook(codes)) * scale


def test_integer_inputs_are_fed_in_the_methods_dtype(host_runner, tmp_path):
    """Codes go in as int64 beside a float32 input; a seeded fill cannot invent codes, and a tensor of another
    dtype of the same size is refused after the run rather than misread."""
    torch.manual_seed(0)
    module = CodesToSignal().eval()
    codes, scale = torch.randint(0, 16, (1, 10)), torch.tensor([2.0])
    path = audiodeploy.lower(module, (codes, scale)).save(tmp_path / "codes.pte")
    run = run_runner(host_runner, path, [codes, scale], RunOptions(warmup=0, iterations=1))
    assert [fed.dtype for fed in run.report.inputs] == ["int64", "float32"]
    torch.testing.assert_close(run.outputs[0], module(codes, scale).detach(), atol=ATOL, rtol=1e-4)
    zeros = run_runner(host_runner, path, options=RunOptions(fill="zeros", warmup=0, iterations=1))
    torch.testing.assert_close(zeros.outputs[0], module(torch.zeros_like(codes), torch.zeros(1)).detach())
    with pytest.raises(NativeError, match=r"input 0 of method 'forward' is int64; --fill seeded makes float32"):
        run_runner(host_runner, path, options=RunOptions(fill="seeded"))
    with pytest.raises(NativeError, match=r"input 1 is int32 but method 'forward' takes float32: convert it"):
        run_runner(host_runner, path, [codes, torch.tensor([2], dtype=torch.int32)], RunOptions(iterations=1))
    with pytest.raises(NativeError, match=r"shape 1x10 of int64 needs 80"):
        run_runner(host_runner, path, [codes.int(), scale], RunOptions(iterations=1))
