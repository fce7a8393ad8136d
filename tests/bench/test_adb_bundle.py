"""``--device adb`` with the project's android-arm64 bundle, end to end, without a phone.

No phone is reachable here. The ``adb`` on PATH is a stand-in (tests/bench/qemu_adb.py): a folder plays the
phone's file system, ``push``/``pull`` copy into and out of it, and ``shell`` runs the command there with
/bin/sh, starting the bundle's own loader under ``qemu-aarch64`` with an empty ``QEMU_LD_PREFIX``. Everything
else is real: the bundle built from the aarch64 executorch wheel, the pushed program and inputs, the runner's
JSON report and outputs pulled back, and the comparison with eager PyTorch. What this does not show: that a
real phone's kernel and SELinux policy let ``/data/local/tmp`` run glibc's loader, and arm64 latency.
"""

from __future__ import annotations

import json
import shlex

import pytest
import torch

from audiodeploy.bench import BenchRequest, run_bench
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import validate
from audiodeploy.bench.runtimes import ExecuTorchRuntime, RuntimeInfo
from audiodeploy.bench.transports import REMOTE_DIR, AdbRunnerTransport, RunCounts
from tests.native.conftest import CHANNELS

from .test_cli_bench import assert_clean_error, audiodeploy

# XNNPACK's arm64 kernels sum in another order than its x86-64 ones.
ATOL = 1e-5


def _runtime(name: str, buffer: bytes) -> ExecuTorchRuntime:
    return ExecuTorchRuntime(RuntimeInfo(name=name, label=name, engine="executorch"), buffer, origin=f"{name}.pte")


def test_bundle_runs_through_its_loader_matches_eager_and_leaves_the_phone_clean(qemu_adb, tiny_program):
    transport = AdbRunnerTransport.for_device("STANDIN")
    x = torch.randn(1, CHANNELS, 40)
    try:
        measured = transport.measure(
            [_runtime("audiodeploy", tiny_program.path.read_bytes())],
            (x,),
            {"audiodeploy": RunCounts(runs=2, warmup=1)},
        )["audiodeploy"]
        assert (qemu_adb.bench_dir / "audiodeploy-runner").is_file()  # the bundle stays for the next program
    finally:
        transport.close([])
    torch.testing.assert_close(measured.output, tiny_program.eager(x), atol=ATOL, rtol=0)
    assert measured.latency.runs == 2 and measured.latency.warmup == 1 and measured.load_s > 0
    assert measured.peak_rss_bytes > 0
    assert not qemu_adb.bench_dir.exists()  # bundle, program, inputs, report and outputs all removed

    described = transport.describe()
    assert described.target == "android-arm64" and described.serial == "STANDIN"
    assert described.device.abi == "arm64-v8a" and described.device.cpu.architecture == "aarch64"
    calls = qemu_adb.calls()
    assert all(call[:2] == ["-s", "STANDIN"] for call in calls)
    pushes = [call[3:] for call in calls if call[2] == "push"]
    bundle = {path.name for path in transport.built.directory.iterdir() if not path.name.startswith(".")}
    assert {arg.rsplit("/", 1)[-1] for arg in pushes[0][:-1]} == bundle and pushes[0][-1] == f"{REMOTE_DIR}/"
    assert [arg.rsplit("/", 1)[-1] for arg in pushes[1]] == ["model.pte", "input_0.bin", ""]
    (run,) = [call[3] for call in calls if call[2] == "shell" and "--model " in call[3]]
    assert run.startswith(f"cd {REMOTE_DIR} && ./ld-linux-aarch64.so.1 --library-path . ./audiodeploy-runner ")
    assert "--input audiodeploy/input_0.bin:1x4x40" in run and "--output-dir audiodeploy/outputs" in run
    assert ["pull", f"{REMOTE_DIR}/audiodeploy"] == [calls[-3][2], calls[-3][3]]
    assert shlex.split(calls[-1][3]) == ["rm", "-rf", REMOTE_DIR]


def test_bench_of_a_recipe_on_the_phone_compares_with_eager(qemu_adb):
    """run_bench as `audiodeploy bench wav2vec2 --variant tiny --device adb:STANDIN` runs it: one dynamic program
    for both lengths (the runner resizes inputs), each output compared with eager PyTorch on this machine."""
    record = run_bench(
        BenchRequest("wav2vec2", variant="tiny", device="adb:STANDIN", seconds=(0.5, 1.0), runs=1, warmup=0)
    )
    assert record["transport"]["kind"] == "adb" and record["transport"]["target"] == "android-arm64"
    assert record["transport"]["device"]["model"] == "stand-in (qemu-aarch64)"
    assert record["machine"]["threads"] is None  # the runner's default on the device
    assert [case["input_shape"] for case in record["cases"]] == [[1, 8000], [1, 16000]]
    for case in record["cases"]:
        figures = case["runtimes"]["audiodeploy"]
        assert figures["max_abs_diff_vs_eager"] < 1e-3  # the recipe's tolerance
        assert figures["peak_rss_bytes"] > 0 and figures["load_s"] > 0 and figures["latency"]["runs"] == 1
    pushed_programs = [c for c in qemu_adb.calls() if c[2] == "push" and c[3].endswith("model.pte")]
    assert len(pushed_programs) == 2  # the same program at each length
    assert not qemu_adb.bench_dir.exists()


def test_a_program_the_phone_cannot_load_is_one_line_and_the_phone_is_cleaned(qemu_adb):
    transport = AdbRunnerTransport.for_device(None)
    broken = _runtime("broken", b"not a program" * 8)
    with pytest.raises(BenchError) as raised:
        try:
            transport.measure([broken], (torch.zeros(1, CHANNELS, 8),), {"broken": RunCounts(1, 0)})
        finally:
            transport.close([])
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("broken on the adb device: the android-arm64 runner failed: loading program")
    assert not qemu_adb.bench_dir.exists()


def test_unreachable_phone_is_one_line_before_anything_is_built(qemu_adb, linear_pte, monkeypatch):
    monkeypatch.setenv("QEMU_ADB_MODE", "unreachable")
    with pytest.raises(BenchError, match=r"^adb device GONE is not reachable \(error: device 'GONE' not found\)"):
        run_bench(BenchRequest(str(linear_pte), device="adb:GONE"))


def test_the_command_pushes_the_bundle_by_default(qemu_adb, linear_pte, runner_cache, tmp_path):
    result = audiodeploy(
        "bench", str(linear_pte), "--device", "adb:STANDIN", "--runs", "2", "--warmup", "1", "--json", str(tmp_path / "r.json"),
        env={**qemu_adb.env(), "AUDIODEPLOY_CACHE_DIR": str(runner_cache)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = validate(json.loads((tmp_path / "r.json").read_text()))
    assert record["transport"]["target"] == "android-arm64"
    figures = record["cases"][0]["runtimes"]["pte"]
    assert figures["latency"]["runs"] == 2 and figures["max_abs_diff_vs_eager"] is None  # a .pte has no module


def test_the_command_names_a_phone_that_is_not_there(qemu_adb, linear_pte, runner_cache, tmp_path):
    result = audiodeploy(
        "bench", str(linear_pte), "--device", "adb", "--json", str(tmp_path / "r.json"),
        env={**qemu_adb.env("unreachable"), "AUDIODEPLOY_CACHE_DIR": str(runner_cache)},
    )  # fmt: skip
    assert_clean_error(result, "adb device is not reachable", "no devices/emulators found")
    assert not (tmp_path / "r.json").exists()
