"""Recipe programs on emulated arm64: a speech encoder (wav2vec2) and a vocoder (HiFi-GAN), tiny variants
lowered by audiodeploy on this machine, run by the linux-aarch64 runner under qemu-aarch64 (XNNPACK's arm64
kernels, emulated), each output compared with eager PyTorch within the recipe's tolerance.

Only two families: lowering all five tiny variants costs about 2.5 minutes of CPU here (see
conftest.RECIPE_FAMILIES); hubert and wavlm share wav2vec2's convolutional front end and transformer, univnet
shares HiFi-GAN's transposed convolutions.

arm64 has int8 kernels of its own (dot-product, i8mm and SME GEMMs), so an int8 program is run too, on two
emulated CPUs: a Cortex-A76 (dot-product, as most phones in use) and qemu's ``max`` (i8mm and SVE2 as well).
Under Debian's qemu 7.2, ``max`` with SME on computed XNNPACK's SME int8 GEMMs wrong (0.43 off, while qemu 10.0
with SME on matched), so the runner's qemu leaves SME out before qemu 10
(``audiodeploy.native.tools.emulated_cpu``)."""

from __future__ import annotations

import pytest
import torch

from audiodeploy.native import RunOptions, run_runner
from audiodeploy.runtime.program import Program
from tests.native.conftest import RECIPE_FAMILIES


@pytest.mark.parametrize("name", RECIPE_FAMILIES)
def test_tiny_recipe_fp32_on_emulated_arm64_matches_eager(arm64_runner, recipe_programs, name):
    program = recipe_programs(name)
    run = run_runner(arm64_runner, program.path, list(program.inputs), RunOptions(warmup=0, iterations=1))
    assert run.emulated and run.report.cpu.architecture == "aarch64"
    torch.testing.assert_close(run.outputs[0], program.eager(), atol=program.built.atol, rtol=0)


@pytest.mark.parametrize("cpu", ["cortex-a76", None], ids=["cortex-a76", "qemu-default"])
def test_tiny_wav2vec2_int8_dynamic_on_emulated_arm64_matches_the_x86_64_run(
    arm64_runner, recipe_programs, cpu, monkeypatch
):
    if cpu is None:
        monkeypatch.delenv("QEMU_CPU", raising=False)
    else:
        monkeypatch.setenv("QEMU_CPU", cpu)
    program = recipe_programs("wav2vec2", "int8-dynamic")
    on_x86 = Program.load(program.path).run(program.inputs)[0]
    run = run_runner(arm64_runner, program.path, list(program.inputs), RunOptions(warmup=0, iterations=1))
    assert run.emulated_cpu == (cpu or run.emulated_cpu) and run.emulated_cpu
    # The same integer dot products and dynamic activation scales: only float rounding differs (1.5e-7 measured).
    torch.testing.assert_close(run.outputs[0], on_x86, atol=1e-5, rtol=0)
    assert (run.outputs[0].argmax(-1) == program.eager().argmax(-1)).float().mean() >= 0.9
