"""Fixtures of the native runner tests: one runner cache per session (so each target is built once, for real),
and a tiny lowered program with its eager module."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from torch.export import Dim

import audiodeploy
from audiodeploy.native import BuiltRunner, build_runner
from tests.pipeline import int8_dynamic_tiny_wav2vec2, lowered_tiny_recipe
from tests.shared import shared_directory

CHANNELS = 4
MAX_LENGTH = 64
CROSS_TOOLS = ("aarch64-linux-gnu-g++", "qemu-aarch64")


class WeightNormedConvLinear(torch.nn.Module):
    """A weight-normed Conv1d (folded into one XNNPACK GEMM by the lowering) then a Linear over time steps."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(CHANNELS, 8, 3, padding=1))
        self.linear = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(torch.relu(self.conv(x)).transpose(1, 2))


@dataclass(frozen=True)
class TinyProgram:
    path: Path
    module: torch.nn.Module

    def eager(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.module(x)


@pytest.fixture(scope="session")
def tiny_program(tmp_path_factory) -> TinyProgram:
    """(1, 4, T) -> (1, T, 5) for T in 4..64, exported with a dynamic length."""
    torch.manual_seed(0)
    module = WeightNormedConvLinear().eval()
    length = Dim("length", min=4, max=MAX_LENGTH)
    lowered = audiodeploy.lower(module, (torch.randn(1, CHANNELS, 32),), dynamic_shapes=({2: length},))
    path = lowered.save(tmp_path_factory.mktemp("program") / "tiny.pte")
    return TinyProgram(path, module)


@pytest.fixture(scope="session")
def runner_cache() -> Path:
    """One folder for the test run, whichever conftest or xdist worker asks (tests/bench imports these fixtures):
    each target is built once, and later requests are cache hits."""
    return shared_directory("runner-cache", lambda folder: None)


def _built_once(target: str, cache: Path) -> BuiltRunner:
    # Two workers asking at once would both miss the cache and build the same target side by side.
    with FileLock(f"{cache}.build.lock"):
        return build_runner(target, cache_dir=cache)


@pytest.fixture(scope="session")
def host_runner(runner_cache) -> BuiltRunner:
    return _built_once("host", runner_cache)


def _require_cross_tools() -> None:
    missing = [tool for tool in CROSS_TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not installed (apt-get install -y g++-aarch64-linux-gnu qemu-user); CI installs them"
        )


@pytest.fixture(scope="session")
def arm64_runner(runner_cache) -> BuiltRunner:
    _require_cross_tools()
    return _built_once("linux-aarch64", runner_cache)


@pytest.fixture(scope="session")
def android_bundle(runner_cache, arm64_runner) -> BuiltRunner:
    return _built_once("android-arm64", runner_cache)


# The two most different recipe families, a speech encoder and a vocoder: lowering every family's tiny variant
# took 2.5 minutes of CPU here (wav2vec2 16 s, hubert 25 s, hifigan 27 s, univnet 40 s, wavlm more), too much for
# one test run; these two took 43 s.
RECIPE_FAMILIES = ("wav2vec2", "hifigan")


@dataclass(frozen=True)
class RecipeProgram:
    """A recipe's tiny variant lowered by audiodeploy (fp32, or int8 with the recipe's default fp32 layers), with
    its eager module and tolerance."""

    name: str
    path: Path
    built: object  # recipes.BuiltModel
    inputs: tuple[torch.Tensor, ...]
    """Seeded inputs of a quarter second."""

    def eager(self) -> torch.Tensor:
        with torch.no_grad():
            return self.built.module(*self.inputs)


@pytest.fixture(scope="session")
def recipe_programs(tmp_path_factory):
    """``recipe_programs(name, quantize=None)``: lowered once per session, shared by the qemu, adb and ssh tests."""

    made: dict[tuple[str, str | None], RecipeProgram] = {}

    def get(name: str, quantize: str | None = None) -> RecipeProgram:
        if (name, quantize) not in made:
            if quantize is None:
                built, lowered = lowered_tiny_recipe(name)  # the program tests/recipes/test_lowered.py checks
            else:
                assert (name, quantize) == ("wav2vec2", "int8-dynamic"), "only this int8 program is shared"
                built, lowered, _ = int8_dynamic_tiny_wav2vec2()  # the program tests/lowering/test_quantize.py checks
            path = lowered.save(tmp_path_factory.mktemp(name) / f"{name}-tiny-{quantize or 'fp32'}.pte")
            inputs = built.random_inputs(built.input.length_for_seconds(0.25), seed=1)
            made[name, quantize] = RecipeProgram(name, path, built, inputs)
        return made[name, quantize]

    return get
