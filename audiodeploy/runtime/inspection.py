"""What a .pte holds, read from the program itself: methods, delegate calls, portable kernels."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

# 1.5.1 has no public reader for a program's execution plan; the serializer's own
# inverse is the one place that parses it (read-only use).
from executorch.exir._serialize._program import deserialize_pte_binary
from executorch.exir.schema import DelegateCall, KernelCall


@dataclass(frozen=True)
class ProgramMethod:
    name: str
    delegates: int
    """Delegate calls in the method's instructions."""
    backends: tuple[str, ...]
    kernels: dict[str, int]
    """Portable kernel calls outside delegates, by op (``aten.convolution``), with counts."""


def describe_program(buffer: bytes) -> list[ProgramMethod]:
    program = deserialize_pte_binary(buffer).program
    methods = []
    for plan in program.execution_plan:
        delegates = 0
        kernels: Counter[str] = Counter()
        for chain in plan.chains:
            for instruction in chain.instructions:
                call = instruction.instr_args
                if isinstance(call, DelegateCall):
                    delegates += 1
                elif isinstance(call, KernelCall):
                    kernels[plan.operators[call.op_index].name.replace("::", ".")] += 1
        methods.append(
            ProgramMethod(
                name=plan.name,
                delegates=delegates,
                backends=tuple(sorted({d.id for d in plan.delegates})),
                kernels=dict(sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))),
            )
        )
    return methods
