"""XNNPACK's weight cache: on while audiodeploy loads a program, off again after, and never for a program that packs
one constant two ways (whose cached packings another program's destruction could free) or computes in fp16."""

from __future__ import annotations

import gc
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import audiodeploy
from audiodeploy import Method
from audiodeploy.runtime import Program
from audiodeploy.runtime.inspection import holds_16_bit_floats
from audiodeploy.runtime.weight_cache import (
    _BackendOption,
    weight_cache_setting,
    weight_cache_suits,
    xnnpack_weight_cache,
)

WEIGHT = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))


class ByLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(WEIGHT.clone())

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight)


class ByMatmul(ByLinear):
    def forward(self, x):
        return x @ self.weight


def _two_methods(rewrite: bool | None) -> bytes:
    """A program whose methods read one matrix as a linear's weight and as a product's right operand."""
    x = torch.randn(4, 16)
    methods = {"linear": Method(ByLinear().eval(), (x,)), "matmul": Method(ByMatmul().eval(), (x,))}
    return audiodeploy.lower(methods, options=audiodeploy.LoweringOptions(rewrite=rewrite)).buffer


def _check_outputs(program: Program) -> None:
    x = torch.randn(4, 16)
    torch.testing.assert_close(program.run((x,), "linear")[0], x @ WEIGHT.t())
    torch.testing.assert_close(program.run((x,), "matmul")[0], x @ WEIGHT)


def test_the_option_is_on_inside_the_block_and_as_before_after_it():
    before = weight_cache_setting()
    assert before is False  # ExecuTorch's default, read back from the runtime
    with xnnpack_weight_cache() as on:
        assert on and weight_cache_setting() is True
    assert weight_cache_setting() is before


def test_audiodeploy_programs_load_with_the_cache():
    program = Program(_two_methods(rewrite=None), trusted=True)
    assert program.weight_cache
    _check_outputs(program)
    assert weight_cache_setting() is False


def test_a_program_packing_a_constant_two_ways_loads_without_the_cache_and_quietly(capfd):
    buffer = _two_methods(rewrite=False)  # stock lowering: the product reads the linear's bytes transposed
    capfd.readouterr()
    first, second = Program(buffer, trusted=True), Program(buffer, trusted=True)
    assert not first.weight_cache and not second.weight_cache
    del first
    gc.collect()
    _check_outputs(second)  # what the first program's destruction freed was not the second's
    assert capfd.readouterr() == ("", "")


def test_an_fp16_program_loads_without_the_cache_in_the_probe_and_here():
    """XNNPACK's fp32 fallback for the operators a CPU has no fp16 kernel for registers converted constants with the
    cache, which crashed 1.5.1's Python extension (wav2vec2's fp16 programs on an Intel Xeon with AVX512-FP16)."""
    x = torch.randn(4, 16)
    fp16 = audiodeploy.lower(ByLinear().eval(), (x,), options=audiodeploy.LoweringOptions(dtype=torch.float16)).buffer
    assert holds_16_bit_floats(fp16) and not weight_cache_suits(fp16)
    assert not holds_16_bit_floats(_two_methods(rewrite=None))
    program = Program(fp16)  # not trusted: probed in a child process first, which loads it as this one does
    assert not program.weight_cache
    torch.testing.assert_close(program.run((x,))[0], x @ WEIGHT.t(), atol=0.05, rtol=0.01)
    assert weight_cache_setting() is False


OPTION_BYTES = """
#include <executorch/runtime/backend/options.h>
#include <cstdio>
int main() {
  executorch::runtime::BackendOptions<1> options;
  if (options.set_option("weight_cache_enabled", true) != executorch::runtime::Error::Ok) return 1;
  const auto* bytes = reinterpret_cast<const unsigned char*>(options.view().data());
  for (size_t i = 0; i < sizeof(executorch::runtime::BackendOption); ++i) std::printf("%02x", bytes[i]);
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ (.ci/run installs it)")
def test_the_option_passed_through_ctypes_has_the_bytes_the_runtime_headers_give_it(tmp_path):
    import executorch.extension.pybindings._C as extension

    wheel = Path(extension.__file__).parents[2]
    (tmp_path / "option.cpp").write_text(OPTION_BYTES)
    binary = tmp_path / "option"
    compile_ = ["g++", "-std=c++17", f"-I{wheel / 'include'}", "-o", str(binary), str(tmp_path / "option.cpp")]
    subprocess.run([*compile_, str(wheel / "lib" / "libexecutorch.so"), f"-Wl,-rpath,{wheel / 'lib'}"], check=True)
    native = bytes.fromhex(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)
    option = _BackendOption(key=b"weight_cache_enabled", index=0)
    option.storage[0] = 1
    assert len(native) == len(bytes(option)) == 324
    assert native[:321] == bytes(option)[:321]  # key, value storage, alternative index; then padding
