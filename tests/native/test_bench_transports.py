"""The bench's runner transports (``--device native`` and ``--device qemu-aarch64``) on a real runner: latency
record, memory, the output to compare with eager, and the emulated label."""

from __future__ import annotations

import pytest
import torch

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.runtimes import ExecuTorchRuntime, RuntimeInfo
from audiodeploy.bench.transports import RunCounts, RunnerTransport, parse_device
from tests.native.conftest import CHANNELS

ATOL = 1e-5


def _runtime(tiny_program) -> ExecuTorchRuntime:
    info = RuntimeInfo(name="audiodeploy", label="audiodeploy", engine="executorch")
    return ExecuTorchRuntime(info, tiny_program.path.read_bytes(), origin=str(tiny_program.path))


def test_runner_devices_parse():
    assert parse_device("native") == ("native", None)
    assert parse_device("qemu-aarch64") == ("qemu-aarch64", None)


def test_native_transport_measures_and_returns_the_output(host_runner, tiny_program):
    transport = RunnerTransport("native", host_runner)
    x = torch.randn(1, CHANNELS, 32)
    measured = transport.measure(
        [_runtime(tiny_program)], (x,), {"audiodeploy": RunCounts(runs=3, warmup=1)}, threads=1
    )
    m = measured["audiodeploy"]
    assert m.latency.runs == 3 and m.latency.warmup == 1 and len(m.latency.samples_s) == 3
    assert m.load_s > 0 and m.peak_rss_bytes > 0
    torch.testing.assert_close(m.output, tiny_program.eager(x), atol=ATOL, rtol=0)
    assert m.notes[0] == "runner threadpool: 1 thread(s)" and m.notes[1].startswith(
        "peak_rss_bytes: the runner process"
    )
    described = transport.describe()
    assert described.kind == "native" and described.emulated is False
    assert described.device.architecture == "x86_64"


def test_qemu_transport_labels_its_latency_emulated(arm64_runner, tiny_program):
    transport = RunnerTransport("qemu-aarch64", arm64_runner)
    x = torch.randn(1, CHANNELS, 20)
    m = transport.measure([_runtime(tiny_program)], (x,), {"audiodeploy": RunCounts(runs=1, warmup=0)})["audiodeploy"]
    torch.testing.assert_close(m.output, tiny_program.eager(x), atol=ATOL, rtol=0)
    assert m.notes[0].startswith("emulated arm64 (qemu-aarch64)")
    assert transport.describe().emulated is True and transport.describe().device.architecture == "aarch64"


def test_a_program_the_runner_refuses_is_a_bench_error(host_runner):
    info = RuntimeInfo(name="broken", label="broken", engine="executorch")
    runtime = ExecuTorchRuntime(info, b"not a program" * 8, origin="broken.pte")
    with pytest.raises(
        BenchError, match=r"broken on --device native: the host runner failed: loading program .*InvalidProgram"
    ):
        RunnerTransport("native", host_runner).measure(
            [runtime], (torch.zeros(1, CHANNELS, 8),), {"broken": RunCounts(1, 0)}
        )


def test_native_device_shows_the_python_runtime_and_the_runner_side_by_side(
    host_runner, runner_cache, monkeypatch, tiny_program
):
    """`--device native` on a .pte: the program in this process (``pte``) and in the host runner
    (``pte-native``), with the same thread count, in one record."""
    from audiodeploy.bench import BenchRequest, run_bench

    monkeypatch.setenv("AUDIODEPLOY_CACHE_DIR", str(runner_cache))
    record = run_bench(BenchRequest(str(tiny_program.path), device="native", runs=3, warmup=1, threads=1))
    assert list(record["runtimes"]) == ["pte", "pte-native"] and record["baseline"] == "pte"
    assert record["runtimes"]["pte-native"]["label"].endswith("in the native runner (audiodeploy-runner, C++)")
    assert record["runtimes"]["pte-native"]["program_bytes"] == record["runtimes"]["pte"]["program_bytes"]
    assert record["transport"]["kind"] == "native" and record["transport"]["target"] == "host"
    assert record["machine"]["threads"] == 1
    (case,) = record["cases"]
    python, native = case["runtimes"]["pte"], case["runtimes"]["pte-native"]
    assert python["latency"]["runs"] == native["latency"]["runs"] == 3
    assert "runner threadpool: 1 thread(s)" in native["notes"]
    assert set(case["ratios"]) == {"pte/pte-native"} and case["paired_ratios"] == {}


def test_native_side_by_side_outputs_agree_with_eager(host_runner, tiny_program):
    from audiodeploy.bench.transports import LocalTransport, NativeSideBySide

    transport = NativeSideBySide(LocalTransport(), RunnerTransport("native", host_runner))
    runtime = _runtime(tiny_program)
    x = torch.randn(1, CHANNELS, 48)
    measured = transport.measure([runtime], (x,), {"audiodeploy": RunCounts(runs=2, warmup=0)}, threads=1)
    transport.close([runtime])
    assert list(measured) == ["audiodeploy", "audiodeploy-native"]
    for m in measured.values():
        torch.testing.assert_close(m.output, tiny_program.eager(x), atol=ATOL, rtol=0)
    assert list(transport.runtime_infos([runtime])) == ["audiodeploy", "audiodeploy-native"]
