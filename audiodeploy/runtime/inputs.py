"""What a method takes, and the check of inputs against it: a wrong input is a one-line :class:`ProgramInputError`.

The runtime checks dtype, rank and size bounds too, but its refusal does not say which input is wrong nor how;
the checks here name the input, what it is and what the method takes instead, and also refuse what the runtime
would take and compute garbage from (NaN or infinite values).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from audiodeploy.errors import AudiodeployError

__all__ = ["ProgramInputError", "TensorSpec", "check_inputs", "describe_specs", "read_spec"]

_SCALAR_TYPES = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64",
    8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 12: "qint8", 13: "quint8", 14: "qint32",
    15: "bfloat16", 23: "float8_e5m2", 24: "float8_e4m3fn", 25: "float8_e5m2fnuz", 26: "float8_e4m3fnuz",
    27: "uint16", 28: "uint32", 29: "uint64",
}  # fmt: skip
"""ExecuTorch's ``ScalarType`` codes (c10's numbering) -> torch dtype names."""


class ProgramInputError(AudiodeployError, ValueError):
    """Inputs the program does not take (count, dtype, rank, size, values); the message names the input."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a method, as the program declares it."""

    dtype: torch.dtype | None
    """None for a value that is not a tensor (or of a dtype torch does not have)."""
    sizes: tuple[int, ...]
    """The sizes; for a dynamic axis its upper bound."""
    scalar_type: int | None
    """ExecuTorch's dtype code (6 is float32), as native runners take it."""

    def __str__(self) -> str:
        if self.scalar_type is None:
            return "a non-tensor value"
        name = str(self.dtype).removeprefix("torch.") if self.dtype is not None else f"dtype {self.scalar_type}"
        return f"{name} {list(self.sizes)}"


def read_spec(read: Any, index: int) -> TensorSpec:
    """The spec of input or output ``index``, from a method meta's ``input_tensor_meta`` or
    ``output_tensor_meta``."""
    try:
        info = read(index)
    except Exception:  # not a tensor (an int or a bool input)
        return TensorSpec(None, (), None)
    code = int(info.dtype())
    name = _SCALAR_TYPES.get(code)
    return TensorSpec(getattr(torch, name, None) if name else None, tuple(int(s) for s in info.sizes()), code)


def describe_specs(specs: Sequence[TensorSpec]) -> str:
    """What a method takes, for messages: ``float32 [1, 1, 64], int64 [1]``."""
    return ", ".join(str(spec) for spec in specs) or "no inputs"


def check_inputs(inputs: Sequence[torch.Tensor], specs: Sequence[TensorSpec], where: str) -> tuple[torch.Tensor, ...]:
    """The inputs as the runtime takes them (contiguous CPU tensors), or :class:`ProgramInputError`.

    ``where`` names the method in messages (its program and name).
    """
    takes = f"it takes {len(specs)}: {describe_specs(specs)}"
    if isinstance(inputs, (torch.Tensor, str, bytes)) or not isinstance(inputs, Sequence):
        raise ProgramInputError(
            f"{where}: give the inputs as a sequence (tuple or list) of tensors, not a {type(inputs).__name__}; {takes}"
        )
    if len(inputs) != len(specs):
        raise ProgramInputError(f"{where} got {len(inputs)} input(s); {takes}")
    return tuple(_check_input(index, value, spec, where) for index, (value, spec) in enumerate(zip(inputs, specs)))


def _check_input(index: int, value: Any, spec: TensorSpec, where: str) -> torch.Tensor:
    """Input ``index`` as the runtime takes it, or :class:`ProgramInputError` saying what is wrong with it."""
    wanted = f"{where} takes {spec} as input {index}"
    if spec.scalar_type is None:
        raise ProgramInputError(f"{where}: input {index} is not a tensor input; audiodeploy runs tensor inputs only")
    if not isinstance(value, torch.Tensor):
        raise ProgramInputError(f"input {index} is a {type(value).__name__}, not a tensor; {wanted}")
    got = f"input {index} is {str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
    if value.is_complex():
        raise ProgramInputError(f"{got}: complex tensors are not taken; {wanted}")
    if value.dtype != spec.dtype:
        raise ProgramInputError(f"{got}; {wanted} (convert it: `.to({spec.dtype})`)")
    if value.dim() != len(spec.sizes):
        raise ProgramInputError(f"{got}, {value.dim()} axes; {wanted}, {len(spec.sizes)} axes")
    over = [axis for axis, (size, bound) in enumerate(zip(value.shape, spec.sizes)) if size > bound]
    if over:
        axis = over[0]
        raise ProgramInputError(
            f"{got}: axis {axis} has {value.shape[axis]}, the program takes at most {spec.sizes[axis]}; "
            f"{wanted} (sizes are upper bounds)"
        )
    if value.device.type != "cpu":
        raise ProgramInputError(f"{got} on {value.device}; {wanted} on the CPU (`.cpu()`)")
    if value.is_floating_point():
        finite = torch.isfinite(value)
        if not bool(finite.all()):
            nan = int(torch.isnan(value).sum())
            raise ProgramInputError(
                f"{got} with {nan} NaN and {int((~finite).sum()) - nan} infinite value(s); {wanted} with finite values"
            )
    return value.detach().contiguous()
