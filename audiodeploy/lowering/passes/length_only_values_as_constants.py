"""Store a value that depends on the input only through its length as a constant cut to that length.

Some models compute a tensor from the input's *length* alone, and compute it on
every call: WavLM's relative-position bias is ``arange``, ``abs``, ``where``,
``log`` and an ``embedding`` lookup on a ``[T, T]`` grid of positions. Those are
integer ops that ExecuTorch 1.5.1's XNNPACK partitioner declines, so they run on
the portable kernels and cut the delegate wherever the value is used. When the
value for every length ``T`` of the exported range is the leading corner of its
value for the longest length, this pass computes it once, for the longest
length, and keeps only a slice per dynamic dimension::

    before                                           after

    n = sym_size(x, 1)                               n = (sym_size(waveform, 1) - b) // a     (host integer math)
    arange(n) ─┐                                     bias [H, Tmax, Tmax] (constant)
    arange(n) ─┴─ sub ── abs ── ... ── embedding ──  ── slice(1, 0, n) ── slice(2, 0, n) ── mul ──
        ── permute ── view [H, n, n] ── mul ──

The length is read from the program's user input rather than from the tensor the
original computation read it from, so that the slices run before the first
delegate instead of between two of them. The slices are copies at the delegate's
edge; the computation they replace is gone.

No constant computed from the length alone grows with the square of the length.
A value that reads no parameter or buffer and two of whose dimensions grow with
the length, a mask ``[T, T]`` or a grid of positions, replaces no model data:
as a constant it would only add the longest length squared to the program
(transformers' ``[1, 1, T, T]`` additive mask up to 10 s is 1 MiB, five times
the program of a wav2vec2 of hidden size 32). It is left to be computed, and what it is computed from (positions,
an ``arange`` of the length) is stored cut to the length instead, so that the grid's arithmetic on them can run in
the delegate (:mod:`banded_masks_as_arithmetic` writes a causal or sliding-window mask so); a mask that masks
nothing has been removed before this pass runs (:mod:`drop_masks_that_mask_nothing`). A learned value of that shape, such as
WavLM's bias above, is still stored, up to :data:`MAX_CONSTANT_BYTES`: left
computed, it would cut the delegate in every layer and, in int8, meet the
quantizer problem described below.

In a program exported for one length (as a phone's runner takes it) the length
is a number and the same computation reads no size: it starts from positions,
an ``arange`` of that number. The pass stores its value whole, with no slice::

    before                                           after

    arange(T) ─┐                                     bias [H, T, T] (constant)
    arange(T) ─┴─ sub ── abs ── ... ── embedding ──  ── mul ──
        ── permute ── view [H, T, T] ── mul ──

Left computed, it would run on the portable kernels between delegates, and
ExecuTorch 1.5.1's ``XNNPACKQuantizer`` would break it: its
``transform_for_annotation`` makes every number an ``add`` or ``mul`` reads a
float32 tensor, also where the other operand is an integer tensor, so the
bucket indices reach the ``embedding`` as floats and int8 calibration fails.

The replacement is checked, not assumed: the pass evaluates the original
computation for every length in the exported range and requires it to equal the
corner of the longest length's value exactly (``torch.equal``). It leaves the
computation as it is, and does nothing on a program without one, when

- the value depends on no symbolic size and computes no positions (an
  ``arange``): a computation on parameters alone is the business of the
  GEMM-weight fold and of :mod:`parameter_only_values_as_constants`, with their
  own rules;
- it depends on more than one symbol, on a symbol without an upper bound, or on
  anything but parameters, unmutated buffers, constants and sizes;
- it reads no parameter or buffer and more than one of its dimensions grows with
  the length (a mask: the constant would grow with the square of the length); what it
  reads is looked at instead;
- it is elementwise arithmetic larger than each tensor it reads (a broadcast, which the
  delegate computes) and only the program's computation reads it: what it reads is looked
  at instead;
- an op in it is impure or nondeterministic;
- its size at the longest length exceeds :data:`MAX_CONSTANT_BYTES` (a range long
  enough for that costs more program size than the computation costs time);
- a dynamic size is not a whole multiple of the symbol plus a constant, or no user
  input's size is one that the length can be computed from;
- any length in the range gives a value that is not the corner of the longest one.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx.experimental.symbolic_shapes import statically_known_true

from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    ancestors,
    evaluated_at,
    insert_op,
    is_pure,
    is_static,
)

aten = torch.ops.aten

MAX_CONSTANT_BYTES = 64 * 2**20
"""Most the pass stores in one program, all its constants together: 64 MiB, e.g. WavLM large's bias (16 heads) up
to about 20 s of audio. Per-layer tables grow with the square of the length times the layers (Wav2Vec2-BERT's
relative-position keys: about 1.5 GB at its base size and 10 s); past the budget they stay computed."""

_POSITIONS = {aten.arange.default, aten.arange.start, aten.arange.start_step}
"""What a computation of a one-length program starts from when it depends on the length: positions."""

_BROADCASTING_ARITHMETIC = frozenset({aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor})

_SIDE_EFFECT_CHECKS = {
    aten._assert_tensor_metadata.default,
    aten._assert_scalar.default,
    aten.sym_constrain_range_for_size.default,
}


@dataclass(frozen=True)
class _LinearSize:
    """A size ``scale * symbol + offset``."""

    scale: int
    offset: int

    @classmethod
    def of(cls, size: int | torch.SymInt, symbol: sympy.Symbol) -> _LinearSize | None:
        expr = sympy.sympify(size.node.expr if isinstance(size, torch.SymInt) else size)
        if expr.free_symbols - {symbol}:
            return None
        try:
            poly = sympy.Poly(expr, symbol)
        except sympy.PolynomialError:  # floor division or another non-polynomial size, e.g. (s0 - 3) // 2
            return None
        if poly.degree() > 1 or not all(c.is_integer for c in poly.all_coeffs()):
            return None
        scale, offset = poly.all_coeffs() if poly.degree() == 1 else [0, poly.all_coeffs()[0]]
        return cls(int(scale), int(offset))

    def at(self, symbol_value: int) -> int:
        return self.scale * symbol_value + self.offset


class LengthOnlyValuesAsConstantsPass(NodeRewritePass):
    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__(exported_program)
        self._stored_bytes = 0
        """What the pass has stored so far, held to `MAX_CONSTANT_BYTES`."""

    def candidates(self) -> list[torch.fx.Node]:
        """The length-only tensors computed here that something else reads, downstream first: a value computed
        from another one that is also read elsewhere is evaluated from its own sources before that one is
        replaced."""
        self._length_only = self._length_only_nodes(self.constants)
        # A grid is left computed (see the module's docstring); what it reads is stored instead, so that its
        # arithmetic on stored positions can run in the delegate.
        stored = self._length_only - self._grids(self._length_only) - self._broadcasts(self._length_only)
        frontier = [n for n in self.graph.nodes if n in stored and self._is_frontier(n, stored)]
        return frontier[::-1]

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        return self._rewrite(self.graph, node, self._length_only, self.constants)

    def finish(self) -> None:
        _erase_orphaned_checks(self.graph)

    # -- which nodes depend on the length only ------------------------------------------------------

    def _length_only_nodes(self, sources: dict[torch.fx.Node, torch.Tensor]) -> set[torch.fx.Node]:
        """Nodes computed from sources and sizes alone (sizes themselves included)."""
        length_only: set[torch.fx.Node] = set(sources)
        for node in self.exported_program.graph.nodes:
            if node.op != "call_function" or node.target in _SIDE_EFFECT_CHECKS:
                continue
            if node.target == aten.sym_size.int:
                length_only.add(node)
            elif is_pure(node.target) and all(n in length_only for n in node.all_input_nodes):
                length_only.add(node)
        return length_only

    def _grids(self, length_only: set[torch.fx.Node]) -> set[torch.fx.Node]:
        """The grids left computed: a length-only tensor that reads no parameter or buffer, more than one of whose
        dimensions grow with the length (a mask), and that the program's computation reads; and the grids it is
        computed from. Stored, they would grow with the square of the length."""

        @functools.cache  # asked of most nodes three times below, and each answer walks the node's computation
        def grid_shaped(node: torch.fx.Node) -> bool:
            val = node.meta.get("val")
            if node.op != "call_function" or not isinstance(val, torch.Tensor):
                return False
            growing = sum(not is_static(size) for size in val.shape)
            return growing > 1 and not self._reads_model_data(_computation(node, length_only))

        read = [n for n in length_only if self._is_frontier(n, length_only) and grid_shaped(n)]
        within = ancestors(read, expand=lambda n: n in length_only and grid_shaped(n))
        return {n for n in within if n in length_only and grid_shaped(n)}

    def _broadcasts(self, length_only: set[torch.fx.Node]) -> set[torch.fx.Node]:
        """The broadcasts left computed: elementwise arithmetic, read by the program's computation, whose result is
        larger than each tensor it reads (a row of cosines repeated over the heads). Stored, it would repeat the
        smaller value in the program; computed, it is one broadcasting op in the delegate, and what it reads is
        stored instead. A broadcast that more length-only ops read (a grid of distances) is stored with them."""

        def larger_than_each_input(node: torch.fx.Node) -> bool:
            result = node.meta["val"].numel()
            inputs = [a.meta["val"] for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]
            return all(not statically_known_true(result <= x.numel()) for x in inputs)

        return {
            n
            for n in length_only
            if n.op == "call_function"
            and n.target in _BROADCASTING_ARITHMETIC
            and self._is_frontier(n, length_only)
            and all(u not in length_only for u in n.users)
            and larger_than_each_input(n)
        }

    @staticmethod
    def _is_frontier(node: torch.fx.Node, length_only: set[torch.fx.Node]) -> bool:
        """A length-only tensor computed here (not a source or a size) that something else reads."""
        if node.op != "call_function" or not isinstance(node.meta.get("val"), torch.Tensor):
            return False
        return any(u not in length_only and u.target not in _SIDE_EFFECT_CHECKS for u in node.users)

    # -- the rewrite ----------------------------------------------------------------------------------

    def _rewrite(
        self,
        graph: torch.fx.Graph,
        node: torch.fx.Node,
        length_only: set[torch.fx.Node],
        sources: dict[torch.fx.Node, torch.Tensor],
    ) -> torch.fx.Node | Skip:
        """A sliced constant in place of ``node``."""
        ep = self.exported_program
        value: torch.Tensor = node.meta["val"]
        computation = _computation(node, length_only)
        symbols = set().union(*(_free_symbols(n.meta.get("val")) for n in computation))
        if not symbols:
            if not any(n.target in _POSITIONS for n in computation):
                return Skip("depends on no size and computes no positions")
            return self._store_whole(graph, node, computation, sources)
        if len(symbols) > 1:
            return Skip(f"depends on {len(symbols)} symbols")
        (symbol,) = symbols
        bounds = ep.range_constraints.get(symbol)
        if bounds is None or not isinstance(bounds.upper, sympy.Integer) or not isinstance(bounds.lower, sympy.Integer):
            return Skip(f"{symbol} has no finite range")
        lower, upper = int(bounds.lower), int(bounds.upper)
        linear_sizes = [_LinearSize.of(size, symbol) for size in value.shape]
        dims = [(d, size) for d, size in enumerate(linear_sizes) if size is not None]
        if len(dims) != len(linear_sizes):
            return Skip("a size is not a multiple of the length plus a constant")
        dynamic = [(d, size) for d, size in dims if size.scale != 0]
        if len(dynamic) > 1 and not self._reads_model_data(computation):
            longest = math.prod(size.at(upper) for _, size in dims) * value.element_size()
            return Skip(
                f"computed from the length alone and {len(dynamic)} of its dimensions grow with it: as a constant it "
                f"would grow with the square of the length ({longest / 2**20:.2f} MiB at the longest)"
            )
        length_input = self._length_input(symbol)
        if length_input is None:
            return Skip(f"no user input has a size from which {symbol} can be computed")
        largest = evaluated_at(computation, node, sources, symbol, upper)
        if self._stored_bytes + largest.numel() * largest.element_size() > MAX_CONSTANT_BYTES:
            return Skip(
                f"{largest.numel() * largest.element_size() / 2**20:.0f} MiB at the longest length, over what is left "
                f"of the pass's {MAX_CONSTANT_BYTES / 2**20:.0f} MiB"
            )
        for symbol_value in range(lower, upper):
            corner = largest[tuple(slice(0, size.at(symbol_value)) for _, size in dims)]
            if not torch.equal(evaluated_at(computation, node, sources, symbol, symbol_value), corner):
                return Skip(f"its value at {symbol} = {symbol_value} is not the corner of its value at {upper}")

        self._stored_bytes += largest.numel() * largest.element_size()
        constant = add_constant(ep, graph, f"{node.name}_at_longest", largest)
        first_op = next(n for n in graph.nodes if n.op != "placeholder")
        with graph.inserting_before(first_op):
            symbol_node = self._symbol_from_input(graph, length_input, symbol, origin=node)
            cut, ends = constant, {}
            for d, size in dynamic:
                if size not in ends:
                    ends[size] = _linear_size_node(graph, symbol_node, size, origin=node)
                cut = insert_op(graph, aten.slice.Tensor, (cut, d, 0, ends[size]), origin=node)
        return cut

    def _store_whole(
        self,
        graph: torch.fx.Graph,
        node: torch.fx.Node,
        computation: list[torch.fx.Node],
        sources: dict[torch.fx.Node, torch.Tensor],
    ) -> torch.fx.Node | Skip:
        """The value of ``node``, computed at the program's one length, as a constant."""
        value = evaluated_at(computation, node, sources, None, 0)
        if self._stored_bytes + value.numel() * value.element_size() > MAX_CONSTANT_BYTES:
            return Skip(
                f"{value.numel() * value.element_size() / 2**20:.0f} MiB, over what is left of the pass's "
                f"{MAX_CONSTANT_BYTES / 2**20:.0f} MiB"
            )
        self._stored_bytes += value.numel() * value.element_size()
        return add_constant(self.exported_program, graph, f"{node.name}_value", value)

    def _reads_model_data(self, computation: list[torch.fx.Node]) -> bool:
        """Whether ``computation`` reads a parameter or a buffer (a learned table), not only sizes and constants."""
        ep = self.exported_program
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
        model_data = {
            node
            for node, spec in zip(placeholders, ep.graph_signature.input_specs)
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER)
        }
        return any(node in model_data for node in computation)

    def _length_input(self, symbol: sympy.Symbol) -> tuple[torch.fx.Node, int, _LinearSize] | None:
        """A user input with a size ``scale * symbol + offset``: (placeholder, dimension, that size)."""
        ep = self.exported_program
        placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
        for node, spec in zip(placeholders, ep.graph_signature.input_specs):
            val = node.meta.get("val")
            if spec.kind != InputKind.USER_INPUT or not isinstance(val, torch.Tensor):
                continue
            for d, size in enumerate(val.shape):
                linear = _LinearSize.of(size, symbol)
                if linear is not None and linear.scale > 0:
                    return node, d, linear
        return None

    @staticmethod
    def _symbol_from_input(
        graph: torch.fx.Graph, length_input: tuple[torch.fx.Node, int, _LinearSize], symbol: sympy.Symbol, *, origin
    ) -> torch.fx.Node:
        """Nodes computing ``symbol`` from the input's size: ``(size - offset) // scale``."""
        node, dim, size = length_input
        read = insert_op(graph, aten.sym_size.int, (node, dim), origin=origin)
        if size.offset:
            read = insert_op(graph, operator.sub, (read, size.offset), origin=origin)
        if size.scale != 1:
            read = insert_op(graph, operator.floordiv, (read, size.scale), origin=origin)
        return read


def _linear_size_node(graph: torch.fx.Graph, symbol_node: torch.fx.Node, size: _LinearSize, *, origin) -> torch.fx.Node:
    node = symbol_node
    if size.scale != 1:
        node = insert_op(graph, operator.mul, (node, size.scale), origin=origin)
    if size.offset:
        node = insert_op(graph, operator.add, (node, size.offset), origin=origin)
    return node


def _free_symbols(val: Any) -> set[sympy.Symbol]:
    sizes: Iterator[Any] = iter(val.shape) if isinstance(val, torch.Tensor) else iter([val])
    return {s for size in sizes if isinstance(size, torch.SymInt) for s in size.node.expr.free_symbols}


def _computation(node: torch.fx.Node, length_only: set[torch.fx.Node]) -> list[torch.fx.Node]:
    """``node`` and the length-only nodes it is computed from, in graph order."""
    computed_from = ancestors([node], expand=lambda n: n in length_only)
    return [n for n in node.graph.nodes if n in computed_from and n in length_only]


def _erase_orphaned_checks(graph: torch.fx.Graph) -> None:
    """Erase metadata checks (``_assert_tensor_metadata``) on values that only those checks still read.

    Dead-code elimination keeps a check, and so the value it checks, because a check
    has a side effect; once the value has been replaced, the check has nothing to check.
    """
    needed = ancestors(
        [
            n
            for n in graph.nodes
            if n.op == "output" or (n.op == "call_function" and n.target not in _SIDE_EFFECT_CHECKS and n.is_impure())
        ]
    )
    for node in list(graph.nodes):
        checked = node.all_input_nodes
        if node.target in _SIDE_EFFECT_CHECKS and all(n.op == "call_function" and n not in needed for n in checked):
            graph.erase_node(node)
