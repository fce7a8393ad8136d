"""`describe_program` reads a program's methods from its flatbuffer as ExecuTorch's own serializer reads them, and
bytes that are not a program are a `ProgramFormatError`, however they are cut or altered."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import audiodeploy
from audiodeploy.runtime.inspection import ProgramFormatError, describe_program


class LinearThenCumsum(torch.nn.Module):
    """A delegated GEMM, then a running sum XNNPACK has no operator for (a portable kernel outside)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.linear(x), dim=-1)


@pytest.fixture(scope="module")
def two_methods() -> bytes:
    torch.manual_seed(0)
    methods = {
        "encode": audiodeploy.Method(LinearThenCumsum().eval(), (torch.randn(1, 8),)),
        "decode": audiodeploy.Method(torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),)),
    }
    return audiodeploy.lower(methods).buffer


def serializers_reading(buffer: bytes) -> list[tuple[str, int, tuple[str, ...], dict[str, int]]]:
    """What ExecuTorch's deserializer (which imports all of executorch.exir) finds in each method."""
    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.exir.schema import DelegateCall, KernelCall

    methods = []
    for plan in deserialize_pte_binary(buffer).program.execution_plan:
        calls = [i.instr_args for chain in plan.chains for i in chain.instructions]
        kernels = Counter(
            plan.operators[c.op_index].name.replace("::", ".") for c in calls if isinstance(c, KernelCall)
        )
        delegates = sum(isinstance(c, DelegateCall) for c in calls)
        methods.append((plan.name, delegates, tuple(sorted({d.id for d in plan.delegates})), dict(kernels)))
    return methods


def test_methods_delegates_and_kernels_are_what_executorch_reads(two_methods):
    ours = [(m.name, m.delegates, m.backends, m.kernels) for m in describe_program(two_methods)]
    assert ours == serializers_reading(two_methods)
    encode = {m.name: m for m in describe_program(two_methods)}["encode"]
    assert encode.delegates == 1 and encode.backends == ("XnnpackBackend",)
    assert encode.kernels.get("aten.cumsum") == 1, encode.kernels


def test_bytes_that_are_no_program_are_a_format_error(two_methods):
    with pytest.raises(ProgramFormatError, match="no ET12 identifier"):
        describe_program(b"\x00" * 64)
    # Cut anywhere past the header, or one byte altered: the right methods, or a format error; nothing else.
    for cut in range(8, len(two_methods), max(1, len(two_methods) // 200)):
        try:
            describe_program(two_methods[:cut])
        except ProgramFormatError:
            pass
    for position in range(8, min(len(two_methods), 4096), 7):
        altered = bytearray(two_methods)
        altered[position] ^= 0xFF
        try:
            describe_program(bytes(altered))
        except ProgramFormatError:
            pass
