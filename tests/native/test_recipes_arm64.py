"""Recipe programs on emulated arm64: a speech encoder (wav2vec2) and a vocoder (HiFi-GAN), tiny variants
lowered by audiodeploy on this machine, run by the linux-aarch64 runner under qemu-aarch64 (XNNPACK's arm64
kernels, emulated), each output compared with eager PyTorch within the recipe's tolerance.

Only two families: lowering all five tiny variants costs about 2.5 minutes of CPU here (see
conftest.RECIPE_FAMILIES); hubert and wavlm share wav2vec2's convolutional front end and transformer, univnet
shares HiFi-GAN's transposed convolutions."""

from __future__ import annotations

import pytest
import torch

from audiodeploy.native import run_runner
from tests.native.conftest import RECIPE_FAMILIES


@pytest.mark.parametrize("name", RECIPE_FAMILIES)
def test_tiny_recipe_fp32_on_emulated_arm64_matches_eager(arm64_runner, recipe_programs, name):
    program = recipe_programs(name)
    run = run_runner(arm64_runner, program.path, list(program.inputs), warmup=0, iterations=1)
    assert run.emulated and run.report["cpu"]["architecture"] == "aarch64"
    torch.testing.assert_close(run.outputs[0], program.eager(), atol=program.built.atol, rtol=0)
