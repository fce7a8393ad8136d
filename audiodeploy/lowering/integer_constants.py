"""Export with a module's integer scalar constants as exact numbers, so that sizes computed from them follow the length.

Convolutional codecs (EnCodec, Mimi, and the models copied from them) keep a convolution's stride, kernel size and
total padding as 0-d int64 tensors, buffers or plain attributes, and compute the padding a length needs from them
with tensor arithmetic::

    n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
    extra = torch.ceil(n_frames).to(torch.int64) * self.stride + self.kernel_size - self.padding_total - length
    F.pad(x, (left, right + extra))

``torch.export`` sees those buffers as tensors whose values it does not know. ``extra`` becomes a tensor computed
from the length, ``F.pad`` reads it with ``.item()``, and the padded length is an unbacked size ``u0``: export stops
at the first comparison with it (``GuardOnDataDependentSymNode``), and even where it does not, no size after it is
known as a function of the input's.

:func:`export_with_exact_integer_constants` exports with each such constant replaced, for the time of the export,
by an :class:`ExactScalar` that carries its value as a Python integer, and a torch function mode
(:class:`_ExactScalarMode`) that computes ``torch.ceil``, ``.to(torch.int64)``, comparisons and the arithmetic
with it as exact rationals of the length's symbol. ``extra`` above becomes a size expression of the length (for a
length that is a multiple of the hop, the constant 0), and ``F.pad`` gets it as a size, as if the model had been
written with Python integers.

When this is safe, and what it assumes:

- **Constants only.** A 0-d integer tensor that the module modifies in place (a counter) is not a constant: any
  in-place method called on one raises :class:`MutatedIntegerConstantError` and the export stops, rather than trace
  a program that would not count. The values are read once, from the module as it is at export, and the originals
  are put back when the export ends, also when it fails.
- **Exact where eager rounds.** The model's tensor arithmetic divides in float32 (``int64 / int64`` is float32 in
  PyTorch) and rounds up from there; the exact rational agrees with it as long as float32 represents the quotient's
  distance from the next integer, which holds for every quotient below 2**24 / stride frames (hours of audio at
  any codec's frame rate). Beyond that eager's padding is the one that is off by a frame.
- **Everything else stays a tensor.** An op this mode does not compute exactly (a constant used as an index, in a
  ``torch.stack``, ...) gets the constant back as a tensor of its own value: the program computes what eager
  computes, only the size bookkeeping above is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeAlias

import torch
from torch.export import ExportedProgram
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from audiodeploy.errors import AudiodeployError

Integer: TypeAlias = "int | torch.SymInt"


class MutatedIntegerConstantError(AudiodeployError, ValueError):
    """A 0-d integer tensor of the module that its forward modifies in place: a counter, not a constant."""

    def __init__(self, message: str, constant: tuple[str, str]) -> None:
        super().__init__(message)
        self.constant = constant
        """(module path, attribute name) of the tensor."""


@dataclass(frozen=True)
class ExactScalar:
    """A 0-d tensor's value, ``numerator / denominator`` exactly, the numerator possibly a size symbol.

    ``floating`` says whether the tensor it stands for is floating point (after a true division), which decides
    what ``int(...)``, ``.item()`` and the dtype give, as they would on the tensor.
    """

    numerator: Integer
    denominator: int = 1
    floating: bool = False
    name: str = "an integer constant"
    """Where the module holds it, for messages: ``encoder.layers.0.stride``."""
    path: tuple[str, str] = ("", "")
    """(module path, attribute name) of the tensor it replaces."""

    def __post_init__(self) -> None:
        if self.denominator <= 0:
            raise ValueError(f"an ExactScalar's denominator is positive, not {self.denominator}")

    # -- the tensor it stands for ------------------------------------------------------------------------------------

    @property
    def dtype(self) -> torch.dtype:
        return torch.get_default_dtype() if self.floating else torch.int64

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def shape(self) -> torch.Size:
        return torch.Size([])

    @property
    def ndim(self) -> int:
        return 0

    def dim(self) -> int:
        return 0

    def numel(self) -> int:
        return 1

    def size(self, dim: int | None = None) -> torch.Size:
        if dim is not None:
            raise IndexError("a 0-d tensor has no dimension to take the size of")
        return torch.Size([])

    def python_value(self) -> Integer | float | torch.SymFloat:
        """The value as PyTorch would give it from ``.item()``: an integer, or a float after a true division."""
        if not self.floating:
            return self._truncated()
        if isinstance(self.numerator, int):
            return float(Fraction(self.numerator, self.denominator))
        return self.numerator / self.denominator

    def as_tensor(self) -> torch.Tensor:
        """A real 0-d tensor of this value (of the length's symbol, when there is one)."""
        value = self.python_value()
        if isinstance(value, (int, float)):
            return torch.tensor(value, dtype=self.dtype)
        return torch.scalar_tensor(value, dtype=self.dtype)

    def item(self) -> Integer | float | torch.SymFloat:
        return self.python_value()

    def tolist(self) -> Integer | float | torch.SymFloat:
        return self.python_value()

    def __index__(self) -> int:
        value = self._truncated()
        if not isinstance(value, int):
            raise TypeError(f"{self.name} depends on the input's length here: it has no Python int value")
        return value

    __int__ = __index__

    def __float__(self) -> float:
        return float(self.python_value())

    def __bool__(self) -> bool:
        return bool(self.numerator != 0)

    def __repr__(self) -> str:
        kind = "float" if self.floating else "int"
        denominator = f"/{self.denominator}" if self.denominator != 1 else ""
        return f"ExactScalar({self.numerator}{denominator}, {kind}, {self.name})"

    # -- conversions ---------------------------------------------------------------------------------------------------

    def to(self, *args: Any, **kwargs: Any) -> ExactScalar | torch.Tensor:
        dtype = kwargs.get("dtype", next((a for a in args if isinstance(a, torch.dtype)), None))
        if dtype is None or len(args) + len(kwargs) > 1:
            return self.as_tensor().to(*args, **kwargs)
        return self._as_dtype(dtype)

    def long(self) -> ExactScalar | torch.Tensor:
        return self._as_dtype(torch.int64)

    def _as_dtype(self, dtype: torch.dtype) -> ExactScalar | torch.Tensor:
        if dtype.is_floating_point:
            return self._made(self.numerator, self.denominator, True)
        if dtype in (torch.int64, torch.int32):
            return self._made(self._truncated(), 1, False)
        return self.as_tensor().to(dtype)

    def _truncated(self) -> Integer:
        """Rounded toward zero, as a cast to an integer dtype rounds."""
        if self.denominator == 1:
            return self.numerator
        if isinstance(self.numerator, int):
            return math.trunc(Fraction(self.numerator, self.denominator))
        # A length's expression: its sign is what the export's range of the length says (a guard, as eager branches).
        if self.numerator >= 0:
            return self.numerator // self.denominator
        return -((-self.numerator) // self.denominator)

    def ceil(self) -> ExactScalar:
        return self._made(-((-self.numerator) // self.denominator), 1, self.floating)

    def floor(self) -> ExactScalar:
        return self._made(self.numerator // self.denominator, 1, self.floating)

    def trunc(self) -> ExactScalar:
        return self._made(self._truncated(), 1, self.floating)

    # -- arithmetic --------------------------------------------------------------------------------------------------

    def _other(self, other: Any) -> ExactScalar | None:
        if isinstance(other, ExactScalar):
            return other
        if isinstance(other, bool):
            return self._made(int(other), 1, False)
        if isinstance(other, (int, torch.SymInt)):
            return self._made(other, 1, False)
        if isinstance(other, float) and math.isfinite(other):
            exact = Fraction(other)
            return self._made(exact.numerator, exact.denominator, True)
        return None  # a tensor or a symbolic float: computed as tensors, by the mode

    def _made(self, numerator: Integer, denominator: int, floating: bool) -> ExactScalar:
        """A value computed from this one: it keeps the name and path of the constant it came from."""
        if isinstance(numerator, int):
            exact = Fraction(numerator, denominator)
            numerator, denominator = exact.numerator, exact.denominator
        return ExactScalar(numerator, denominator, floating, self.name, self.path)

    def _sum(self, other: ExactScalar, sign: int) -> ExactScalar:
        numerator = self.numerator * other.denominator + sign * other.numerator * self.denominator
        return self._made(numerator, self.denominator * other.denominator, self.floating or other.floating)

    def __add__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        return NotImplemented if exact is None else self._sum(exact, 1)

    __radd__ = __add__

    def __sub__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        return NotImplemented if exact is None else self._sum(exact, -1)

    def __rsub__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        return NotImplemented if exact is None else exact._sum(self, -1)

    def __neg__(self) -> ExactScalar:
        return self._made(-self.numerator, self.denominator, self.floating)

    def __pos__(self) -> ExactScalar:
        return self

    def __mul__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        if exact is None or not isinstance(exact.denominator, int):
            return NotImplemented
        return self._made(
            self.numerator * exact.numerator, self.denominator * exact.denominator, self.floating or exact.floating
        )

    __rmul__ = __mul__

    def _quotient(self, divisor: ExactScalar) -> tuple[Integer, int] | None:
        """``self / divisor`` as (numerator, positive denominator), for a divisor that is a known non-zero number."""
        if not isinstance(divisor.numerator, int) or divisor.numerator == 0:
            return None
        numerator, denominator = self.numerator * divisor.denominator, self.denominator * divisor.numerator
        return (numerator, denominator) if denominator > 0 else (-numerator, -denominator)

    def __truediv__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        quotient = None if exact is None else self._quotient(exact)
        return NotImplemented if quotient is None else self._made(*quotient, True)

    def __rtruediv__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        return NotImplemented if exact is None else exact.__truediv__(self)

    def __floordiv__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        quotient = None if exact is None else self._quotient(exact)
        if quotient is None:
            return NotImplemented
        assert exact is not None
        return self._made(quotient[0] // quotient[1], 1, self.floating or exact.floating)

    def __rfloordiv__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        return NotImplemented if exact is None else exact.__floordiv__(self)

    def __mod__(self, other: Any) -> ExactScalar:
        exact = self._other(other)
        whole = NotImplemented if exact is None else self.__floordiv__(exact)
        if whole is NotImplemented:
            return NotImplemented
        return self - whole * exact

    # -- comparisons: the denominators are positive, so cross-multiplying keeps the order --------------------------

    def _cross(self, other: Any) -> tuple[Integer, Integer] | None:
        exact = self._other(other)
        if exact is None:
            return None
        return self.numerator * exact.denominator, exact.numerator * self.denominator

    def __lt__(self, other: Any) -> Any:
        pair = self._cross(other)
        return NotImplemented if pair is None else pair[0] < pair[1]

    def __le__(self, other: Any) -> Any:
        pair = self._cross(other)
        return NotImplemented if pair is None else pair[0] <= pair[1]

    def __gt__(self, other: Any) -> Any:
        pair = self._cross(other)
        return NotImplemented if pair is None else pair[0] > pair[1]

    def __ge__(self, other: Any) -> Any:
        pair = self._cross(other)
        return NotImplemented if pair is None else pair[0] >= pair[1]

    def __eq__(self, other: object) -> Any:
        pair = self._cross(other)
        return NotImplemented if pair is None else pair[0] == pair[1]

    def __ne__(self, other: object) -> Any:
        pair = self._cross(other)
        return NotImplemented if pair is None else pair[0] != pair[1]

    def __hash__(self) -> int:
        return id(self)

    # -- everything else is the tensor's -------------------------------------------------------------------------------

    def __getattr__(self, attribute: str) -> Any:
        if attribute.endswith("_") and not attribute.startswith("_"):
            raise MutatedIntegerConstantError(
                f"{self.name} is modified in place ({attribute}) by the model's forward, so it is not a constant; "
                "export it as the model's state (a mutable buffer), or lower without rewrites",
                self.path,
            )
        return getattr(self.as_tensor(), attribute)

    @classmethod
    def __torch_function__(
        cls, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        return _call_with_exact_scalars(func, args, kwargs or {})


_ROUNDING: dict[Callable[..., Any], Callable[[ExactScalar], ExactScalar]] = {
    torch.ceil: ExactScalar.ceil,
    torch.floor: ExactScalar.floor,
    torch.trunc: ExactScalar.trunc,
    torch.Tensor.ceil: ExactScalar.ceil,
    torch.Tensor.floor: ExactScalar.floor,
    torch.Tensor.trunc: ExactScalar.trunc,
}
"""Torch functions that an :class:`ExactScalar` computes exactly itself."""


def _call_with_exact_scalars(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call ``func`` where some arguments are :class:`ExactScalar` s: exactly if it is rounding, else with their values.

    A size argument (``F.pad``'s amounts, a view's shape) takes the exact value, an integer or a length's symbol. An
    op that takes only tensors there refuses it, and gets the value as a 0-d tensor instead.
    """
    if func in _ROUNDING and len(args) == 1 and not kwargs and isinstance(args[0], ExactScalar):
        return _ROUNDING[func](args[0])
    leaves = pytree.tree_leaves((args, kwargs))
    if not any(isinstance(leaf, ExactScalar) for leaf in leaves):
        return func(*args, **kwargs)
    as_values = pytree.tree_map_only(ExactScalar, ExactScalar.python_value, (args, kwargs))
    try:
        return func(*as_values[0], **as_values[1])
    except TypeError:
        as_tensors = pytree.tree_map_only(ExactScalar, ExactScalar.as_tensor, (args, kwargs))
        return func(*as_tensors[0], **as_tensors[1])


class _ExactScalarMode(TorchFunctionMode):
    """Routes every torch function that has an :class:`ExactScalar` among its arguments, at any depth, to it.

    An ExactScalar's own ``__torch_function__`` is called only when it is a direct argument; ``F.pad(x, (a, b))``
    takes it inside a tuple, which only a mode sees.
    """

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        return _call_with_exact_scalars(func, args, kwargs or {})


def integer_scalar_constants(module: torch.nn.Module) -> dict[tuple[str, str], torch.Tensor]:
    """The 0-d integer tensors held by ``module`` and its submodules, buffers or plain attributes: (module, name)."""
    found: dict[tuple[str, str], torch.Tensor] = {}
    for path, submodule in module.named_modules(remove_duplicate=False):
        held = {**vars(submodule), **submodule._buffers}
        for name, value in held.items():
            if (
                isinstance(value, torch.Tensor)
                and not isinstance(value, torch.nn.Parameter)
                and value.dim() == 0
                and not value.dtype.is_floating_point
                and not value.dtype.is_complex
                and value.dtype != torch.bool
            ):
                found[(path, name)] = value
    return found


@contextmanager
def _exact_integer_constants(module: torch.nn.Module, constants: set[tuple[str, str]]) -> Iterator[None]:
    """Replace these 0-d integer tensors of ``module`` (module path, name) by :class:`ExactScalar` s of their values;
    put them back after."""
    held: dict[torch.nn.Module, tuple[dict[str, Any], dict[str, Any]]] = {}  # its attributes, its buffers
    try:
        for (path, name), tensor in integer_scalar_constants(module).items():
            if (path, name) not in constants:
                continue
            submodule = module.get_submodule(path)
            if submodule not in held:
                # Set aside whole, and given back whole: a buffer stays a buffer, in its place in the state dict.
                held[submodule] = (dict(vars(submodule)), submodule._buffers)
                object.__setattr__(submodule, "_buffers", dict(submodule._buffers))
            submodule._buffers.pop(name, None)  # else nn.Module.__getattr__ would still find the tensor
            qualified = f"{path}.{name}" if path else name
            object.__setattr__(submodule, name, ExactScalar(int(tensor.item()), name=qualified, path=(path, name)))
        with _ExactScalarMode():
            yield
    finally:
        for submodule, (attributes, buffers) in held.items():
            vars(submodule).clear()
            vars(submodule).update(attributes)
            object.__setattr__(submodule, "_buffers", buffers)


def export_with_exact_integer_constants(
    module: torch.nn.Module, example_inputs: tuple[Any, ...], dynamic_shapes: Any
) -> ExportedProgram:
    """``torch.export.export``, with the module's 0-d integer tensors taken as the exact numbers they hold.

    A tensor the forward modifies in place is a counter, not a constant: it is left a tensor, and the export runs
    again without it. See the module's docstring for what the rest changes and when it is safe. A module with none
    exports as it would with ``torch.export.export``.
    """
    constants = set(integer_scalar_constants(module))
    while constants:
        try:
            with _exact_integer_constants(module, constants):
                return torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)
        except MutatedIntegerConstantError as mutated:
            if mutated.constant not in constants:
                raise
            constants.discard(mutated.constant)
    return torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)
