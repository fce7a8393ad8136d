"""The adb transport without a phone: command construction, parsing of executor_runner's log, and the
subprocess boundary played by a fake `adb` on PATH (conftest.FakeAdb)."""

from __future__ import annotations

import shlex

import pytest
import torch

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.runtimes import pte_runtime
from audiodeploy.bench.transports import (
    AdbTransport,
    RunCounts,
    SshDestination,
    parse_device,
    parse_runner_output,
)
from audiodeploy.bench.transports.executor_runner import log_measurement

from .runner_logs import current_runner_log, method_load_failure_log, older_runner_log, parse_failure_log

MODEL = "/data/local/tmp/audiodeploy-bench/audiodeploy.pte"


# --- parsing ---------------------------------------------------------------------------------


def test_current_runner_log_gives_load_time_every_iteration_and_threads():
    timings = parse_runner_output(current_runner_log(MODEL, [25.5, 20.25, 20.5], load_ms=118.204, threads=4))
    assert timings.load_ms == pytest.approx(118.204)
    assert timings.iterations_ms == pytest.approx([25.5, 20.25, 20.5])
    assert timings.executions == 3 and timings.total_ms == pytest.approx(66.25)
    assert timings.threads == 4


def test_warmup_iterations_are_dropped_from_the_latency():
    timings = parse_runner_output(current_runner_log(MODEL, [90.0, 30.0, 20.0, 22.0, 21.0]))
    measurement = log_measurement(timings, RunCounts(runs=3, warmup=2))
    assert measurement.latency.samples_s == pytest.approx([0.020, 0.022, 0.021])
    assert measurement.latency.median_s == pytest.approx(0.021) and measurement.latency.warmup == 2
    assert measurement.load_s == pytest.approx(0.118204)


def test_older_runner_log_gives_the_mean_and_says_so():
    timings = parse_runner_output(older_runner_log(MODEL, executions=4, total_ms=100.0))
    assert timings.iterations_ms == [] and timings.load_ms is None
    measurement = log_measurement(timings, RunCounts(runs=3, warmup=1))
    assert measurement.latency.median_s == pytest.approx(0.025) and measurement.latency.runs == 4
    assert any("only its total" in note for note in measurement.notes)


def test_logcat_messages_without_the_posix_prefix_parse_too():
    text = "11-29 16:02:11.512  4711  4711 I ExecuTorch: Model executed successfully 2 time(s) in 40.000000 ms.\n"
    assert parse_runner_output(text).total_ms == pytest.approx(40.0)


def test_a_runner_that_aborts_is_an_error_quoting_its_fatal_line():
    with pytest.raises(BenchError, match=r"Loading of method forward failed with status 0x20") as error:
        parse_runner_output(method_load_failure_log(MODEL))
    assert "\n" not in str(error.value)


def test_a_file_that_is_not_a_program_is_an_error_quoting_the_runner():
    with pytest.raises(BenchError, match="Failed to parse model file"):
        parse_runner_output(parse_failure_log(MODEL))


def test_no_output_at_all_is_an_error_pointing_at_the_logging_build_flags():
    with pytest.raises(BenchError, match="did not complete on the device: no output .*EXECUTORCH_ENABLE_LOGGING=ON"):
        parse_runner_output("")


def test_cut_output_is_an_error():
    text = current_runner_log(MODEL, [20.0, 21.0, 22.0]).replace("Iteration 2 of 3", "Iterati")
    with pytest.raises(BenchError, match="2 of 3 iteration times"):
        parse_runner_output(text)


# --- command construction ----------------------------------------------------------------------


def test_device_option():
    assert parse_device("local") == ("local", None)
    assert parse_device("adb") == ("adb", None)
    assert parse_device("adb:R58M123ABC") == ("adb", "R58M123ABC")
    assert parse_device("ssh:pi@raspberrypi.local") == ("ssh", "pi@raspberrypi.local")
    assert parse_device("ssh:board:2222") == ("ssh", "board:2222")
    with pytest.raises(BenchError, match=r"'adb:SERIAL' or 'ssh:\[USER@\]HOST\[:PORT\]'"):
        parse_device("usb")


@pytest.mark.parametrize(
    "spec", ["ssh:-oProxyCommand=x", "ssh:-l@host", "ssh:host:0", "ssh:host:ssh", "ssh:a b", "ssh:@host"]
)
def test_ssh_destinations_that_ssh_would_misread_are_refused(spec):
    with pytest.raises(BenchError, match=r"--device ssh:"):
        parse_device(spec)


def test_ssh_destination_parts():
    destination = SshDestination.parse("pi@10.0.0.7:2222")
    assert (destination.user, destination.host, destination.port, destination.target) == (
        "pi",
        "10.0.0.7",
        2222,
        "pi@10.0.0.7",
    )
    assert SshDestination.parse("board") == SshDestination("board")


def test_adb_commands_name_the_serial_only_when_given(tmp_path):
    assert AdbTransport(tmp_path / "r", "SER1").adb_command("get-state") == ["adb", "-s", "SER1", "get-state"]
    assert AdbTransport(tmp_path / "r").adb_command("get-state") == ["adb", "get-state"]


def test_runner_command_passes_model_inputs_executions_and_threads(tmp_path):
    transport = AdbTransport(tmp_path / "xnn_executor_runner", "SER1")
    command = transport.runner_command("stock.pte", "input0.bin", executions=12, threads=4)
    assert command == (
        "cd /data/local/tmp/audiodeploy-bench && /data/local/tmp/audiodeploy-bench/xnn_executor_runner "
        "--model_path=/data/local/tmp/audiodeploy-bench/stock.pte --num_executions=12 "
        "--inputs=/data/local/tmp/audiodeploy-bench/input0.bin --cpu_threads=4"
    )
    # Without --threads the runner keeps its heuristic (performant cores): no flag.
    assert "--cpu_threads" not in transport.runner_command("a.pte", None, executions=3, threads=None)


def test_runner_command_quotes_a_remote_directory_with_spaces(tmp_path):
    transport = AdbTransport(tmp_path / "runner", remote_dir="/data/local/tmp/my bench")
    command = transport.runner_command("a.pte", None, executions=1, threads=None)
    assert shlex.split(command)[:3] == ["cd", "/data/local/tmp/my bench", "&&"]


# --- through a fake adb ------------------------------------------------------------------------


def test_measure_pushes_runner_program_and_input_then_parses_the_runner(fake_adb, linear_pte):
    transport = AdbTransport(fake_adb.runner, "SER1")
    transport.connect()
    assert transport.device == {"model": "Pixel 8", "abi": "arm64-v8a", "android": "15"}
    runtime = pte_runtime(linear_pte)
    x = torch.randn(1, 8)
    measured = transport.measure([runtime], (x,), {"pte": RunCounts(runs=3, warmup=2)}, threads=2)["pte"]

    assert measured.latency.runs == 3 and measured.latency.warmup == 2
    assert measured.latency.samples_s == pytest.approx([0.021, 0.0215, 0.022])  # iterations 3-5 of 5
    assert measured.load_s == pytest.approx(0.118204) and measured.peak_rss_bytes is None
    assert (fake_adb.pushed / "pte.pte").read_bytes() == linear_pte.read_bytes()
    assert (fake_adb.pushed / "input0.bin").read_bytes() == x.numpy().tobytes()
    remote = fake_adb.device / "data/local/tmp/audiodeploy-bench"
    assert sorted(p.name for p in remote.iterdir()) == ["executor_runner"]  # program and input removed after
    calls = fake_adb.calls()
    assert ["-s", "SER1", "shell", "chmod", "755", "/data/local/tmp/audiodeploy-bench/executor_runner"] in calls
    run = next(c for c in calls if any("--model_path=" in part for part in c))
    assert run[:3] == ["-s", "SER1", "shell"]
    assert "--num_executions=5" in run[3] and "--cpu_threads=2" in run[3]
    assert "--inputs=/data/local/tmp/audiodeploy-bench/input0.bin" in run[3]


def test_unreachable_device_is_one_line(fake_adb, monkeypatch):
    monkeypatch.setenv("FAKE_ADB_MODE", "unreachable")
    with pytest.raises(BenchError, match=r"adb device SER9 is not reachable \(error: device 'SER9' not found\)"):
        AdbTransport(fake_adb.runner, "SER9").connect()


def test_missing_runner_binary_is_named(fake_adb, tmp_path):
    with pytest.raises(BenchError, match="no such file; build executor_runner"):
        AdbTransport(tmp_path / "nope", "SER1").connect()


def test_runner_failing_on_the_device_is_one_line(fake_adb, monkeypatch, linear_pte):
    monkeypatch.setenv("FAKE_ADB_MODE", "method-fails")
    transport = AdbTransport(fake_adb.runner)
    transport.connect()
    with pytest.raises(BenchError, match="did not complete on the device: In function main"):
        transport.measure([pte_runtime(linear_pte)], (torch.randn(1, 8),), {"pte": RunCounts(2, 1)})


def test_adb_missing_from_path_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    runner = tmp_path / "executor_runner"
    runner.write_bytes(b"x")
    with pytest.raises(BenchError, match="adb: not found on PATH"):
        AdbTransport(runner).connect()
