"""What a .pte holds, read from the program itself: methods, delegate calls, portable kernels.

1.5.1 has no public reader of a program's execution plan. The serializer's own inverse
(``executorch.exir._serialize``) imports all of ``executorch.exir`` first, whose edge-dialect tables take about 5 s
to load here: more than everything else `audiodeploy inspect` does. So this module reads the few fields it needs
straight from the flatbuffer, by the field order of ExecuTorch's ``program.fbs`` (schema 1.5.1, checked against the
serializer's reading in tests/runtime/test_inspection.py).
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass

from audiodeploy.runtime.pte_check import FILE_IDENTIFIER, GIVE_PTE, ProgramLoadError


@dataclass(frozen=True)
class ProgramMethod:
    name: str
    delegates: int
    """Delegate calls in the method's instructions."""
    backends: tuple[str, ...]
    kernels: dict[str, int]
    """Portable kernel calls outside delegates, by op (``aten.convolution``), with counts."""


class ProgramFormatError(ProgramLoadError):
    """The bytes are not the flatbuffer of an ExecuTorch program (an offset points outside them, say)."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"not an ExecuTorch program's flatbuffer ({problem}); {GIVE_PTE}")


# Field slots of program.fbs's tables (a table's n-th field is the n-th entry of its vtable).
_PROGRAM_EXECUTION_PLAN = 1
_PLAN_NAME, _PLAN_VALUES, _PLAN_CHAINS, _PLAN_OPERATORS, _PLAN_DELEGATES = 0, 2, 5, 6, 7
_EVALUE_TYPE, _EVALUE_VALUE = 0, 1
_TENSOR = 5  # a member of the KernelTypes union, from 1: Null, Int, Bool, Double, Tensor
_TENSOR_SCALAR_TYPE = 0
_HALF, _BFLOAT16 = 5, 15  # scalar_type.fbs
_CHAIN_INSTRUCTIONS = 2
_INSTRUCTION_ARGS_TYPE, _INSTRUCTION_ARGS = 0, 1  # a union is two slots: its type, then its table
_KERNEL_CALL, _DELEGATE_CALL = 1, 2  # members of the InstructionArguments union, from 1
_KERNEL_CALL_OP_INDEX = 0
_OPERATOR_NAME = 0
_DELEGATE_ID = 0


class _Flatbuffer:
    """Tables, vectors and strings of one flatbuffer, every read bounds-checked."""

    def __init__(self, buffer: bytes) -> None:
        self.buffer = memoryview(buffer)

    def _unpack(self, layout: str, position: int) -> int:
        if not 0 <= position <= len(self.buffer) - struct.calcsize(layout):
            raise ProgramFormatError(f"offset {position} is outside the program's {len(self.buffer)} bytes")
        return int(struct.unpack_from(layout, self.buffer, position)[0])

    def root(self) -> int:
        return self._unpack("<I", 0)

    def _field(self, table: int, slot: int) -> int | None:
        """Where `slot` of the table at `table` is stored, or None where it is absent (its default)."""
        vtable = table - self._unpack("<i", table)
        entry = 4 + 2 * slot
        if entry >= self._unpack("<H", vtable):
            return None
        offset = self._unpack("<H", vtable + entry)
        return table + offset if offset else None

    def _deref(self, position: int) -> int:
        return position + self._unpack("<I", position)

    def scalar(self, table: int, slot: int, layout: str) -> int:
        position = self._field(table, slot)
        return 0 if position is None else self._unpack(layout, position)

    def table(self, table: int, slot: int) -> int | None:
        position = self._field(table, slot)
        return None if position is None else self._deref(position)

    def tables(self, table: int, slot: int) -> list[int]:
        """The tables of a vector of tables (empty where the vector is absent)."""
        position = self._field(table, slot)
        if position is None:
            return []
        vector = self._deref(position)
        length = self._unpack("<I", vector)
        if vector + 4 + 4 * length > len(self.buffer):
            raise ProgramFormatError(f"a vector of {length} at {vector} runs past the program's end")
        return [self._deref(vector + 4 + 4 * index) for index in range(length)]

    def string(self, table: int, slot: int) -> str:
        position = self._field(table, slot)
        if position is None:
            return ""
        start = self._deref(position)
        length = self._unpack("<I", start)
        if start + 4 + length > len(self.buffer):
            raise ProgramFormatError(f"a string at {start} runs past the program's end")
        try:
            return bytes(self.buffer[start + 4 : start + 4 + length]).decode("utf-8")
        except UnicodeDecodeError:
            raise ProgramFormatError(f"the string at {start} is not UTF-8") from None


def _execution_plans(buffer: bytes) -> tuple[_Flatbuffer, list[int]]:
    """The program's flatbuffer and its methods' execution plans; a `ProgramFormatError` where it has none."""
    if buffer[4:8] != FILE_IDENTIFIER:
        raise ProgramFormatError(f"no {FILE_IDENTIFIER.decode()} identifier at bytes 4-7")
    flatbuffer = _Flatbuffer(buffer)
    return flatbuffer, flatbuffer.tables(flatbuffer.root(), _PROGRAM_EXECUTION_PLAN)


def holds_16_bit_floats(buffer: bytes) -> bool:
    """Whether a method of the program in `buffer` has an fp16 or bf16 tensor among its values (inputs, outputs,
    constants and the tensors between its instructions; not the tensors inside a delegate's own payload).
    A `ProgramFormatError` where the bytes are not a program's flatbuffer."""
    flatbuffer, plans = _execution_plans(buffer)
    for plan in plans:
        for evalue in flatbuffer.tables(plan, _PLAN_VALUES):
            if flatbuffer.scalar(evalue, _EVALUE_TYPE, "<B") != _TENSOR:
                continue
            tensor = flatbuffer.table(evalue, _EVALUE_VALUE)
            if tensor is not None and flatbuffer.scalar(tensor, _TENSOR_SCALAR_TYPE, "<b") in (_HALF, _BFLOAT16):
                return True
    return False


def describe_program(buffer: bytes) -> list[ProgramMethod]:
    """Each method of the program in `buffer`: its delegate calls, their backends and the kernels outside them.
    A `ProgramFormatError` where the bytes are not a program's flatbuffer (`pte_check` finds most such files first)."""
    flatbuffer, plans = _execution_plans(buffer)
    methods = []
    for plan in plans:
        operators = [flatbuffer.string(o, _OPERATOR_NAME) for o in flatbuffer.tables(plan, _PLAN_OPERATORS)]
        delegates = 0
        kernels: Counter[str] = Counter()
        for chain in flatbuffer.tables(plan, _PLAN_CHAINS):
            for instruction in flatbuffer.tables(chain, _CHAIN_INSTRUCTIONS):
                kind = flatbuffer.scalar(instruction, _INSTRUCTION_ARGS_TYPE, "<B")
                if kind == _DELEGATE_CALL:
                    delegates += 1
                elif kind == _KERNEL_CALL:
                    call = flatbuffer.table(instruction, _INSTRUCTION_ARGS)
                    index = 0 if call is None else flatbuffer.scalar(call, _KERNEL_CALL_OP_INDEX, "<i")
                    if not 0 <= index < len(operators):
                        raise ProgramFormatError(f"a kernel call names operator {index} of {len(operators)}")
                    kernels[operators[index].replace("::", ".")] += 1
        backends = {flatbuffer.string(d, _DELEGATE_ID) for d in flatbuffer.tables(plan, _PLAN_DELEGATES)}
        methods.append(
            ProgramMethod(
                name=flatbuffer.string(plan, _PLAN_NAME),
                delegates=delegates,
                backends=tuple(sorted(backends)),
                kernels=dict(sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))),
            )
        )
    return methods
