"""The runner cross-compiled for arm64 and run under qemu-aarch64: as for a Linux board (the cross toolchain's
sysroot as QEMU_LD_PREFIX), and as the Android bundle through its own loader with an empty QEMU_LD_PREFIX,
standing in for a phone's /data/local/tmp."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import torch
from torch.export import Dim

import audiodeploy
from audiodeploy.native import RunOptions, copy_runner, run_runner
from audiodeploy.native.build import BuiltRunner
from audiodeploy.native.tools import BUNDLE_SYSTEM_LIBRARIES
from audiodeploy.runtime.program import Program
from tests.native.conftest import CHANNELS, MAX_LENGTH

# XNNPACK's arm64 kernels sum in another order than its x86-64 ones.
ATOL = 1e-5


def test_linux_aarch64_fp32_under_qemu_matches_eager(arm64_runner, tiny_program):
    x = torch.randn(1, CHANNELS, 40)
    run = run_runner(arm64_runner, tiny_program.path, [x], RunOptions(warmup=0, iterations=1))
    torch.testing.assert_close(run.outputs[0], tiny_program.eager(x), atol=ATOL, rtol=0)
    assert run.emulated
    assert run.report.cpu.architecture == "aarch64" and run.report.cpu.machine == "aarch64"


def test_an_fp16_program_under_qemu_with_fp16_arithmetic_matches_the_x86_64_run(
    arm64_runner, tiny_program, tmp_path, monkeypatch
):
    """A Cortex-A76 has ARMv8.2's fp16 arithmetic: XNNPACK's arm64 fp16 kernels run (emulated), where this x86-64
    machine's run natively with AVX512-FP16 and accumulate in fp32 without it. Both round to fp16 between
    operators."""
    monkeypatch.setenv("QEMU_CPU", "cortex-a76")
    length = Dim("length", min=4, max=MAX_LENGTH)
    lowered = audiodeploy.lower(
        tiny_program.module,
        (torch.randn(1, CHANNELS, 32),),
        dynamic_shapes=({2: length},),
        options=audiodeploy.LoweringOptions(dtype=torch.float16),
    )
    path = lowered.save(tmp_path / "tiny-fp16.pte")
    x = torch.randn(1, CHANNELS, 40)
    on_x86 = Program.load(path).run((x,))[0]
    run = run_runner(arm64_runner, path, [x], RunOptions(warmup=0, iterations=1))
    assert run.emulated_cpu == "cortex-a76" and run.outputs[0].dtype == torch.float32
    eager = tiny_program.eager(x)
    scale = float(eager.abs().max())
    # fp16 keeps 11 bits: each side within a few of its units of eager, and of each other.
    torch.testing.assert_close(run.outputs[0], eager, atol=4e-3 * scale, rtol=0)
    torch.testing.assert_close(run.outputs[0], on_x86, atol=4e-3 * scale, rtol=0)


def test_android_bundle_runs_through_its_own_loader_from_a_copied_folder(android_bundle, tiny_program, tmp_path):
    names = {path.name for path in android_bundle.directory.iterdir()}
    assert {"audiodeploy-runner", "run.sh", "libexecutorch.so", *BUNDLE_SYSTEM_LIBRARIES} <= names
    # Copied elsewhere, as `adb push` would: nothing may point back at the cache or the host's arm64 sysroot.
    phone = copy_runner(android_bundle, tmp_path / "data-local-tmp" / "audiodeploy")
    moved = BuiltRunner("android-arm64", phone, android_bundle.executorch_version)
    x = torch.randn(1, CHANNELS, 24)
    run = run_runner(moved, tiny_program.path, [x], RunOptions(warmup=0, iterations=1))
    torch.testing.assert_close(run.outputs[0], tiny_program.eager(x), atol=ATOL, rtol=0)
    assert run.report.cpu.architecture == "aarch64"


@pytest.mark.skipif(os.path.exists("/lib/ld-linux-aarch64.so.1"), reason="this host has an arm64 loader of its own")
def test_bundle_runner_without_its_loader_finds_no_libc(android_bundle):
    """Proves the empty prefix is honoured: started directly, the runner's interpreter path does not resolve."""
    environment = dict(os.environ, QEMU_LD_PREFIX="")
    done = subprocess.run(
        [shutil.which("qemu-aarch64"), str(android_bundle.executable), "--help"],
        capture_output=True, text=True, env=environment,
    )  # fmt: skip
    assert done.returncode != 0
