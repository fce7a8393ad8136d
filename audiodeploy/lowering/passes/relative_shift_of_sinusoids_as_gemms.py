"""Write the Transformer-XL relative shift of scores against sinusoidal positions as two GEMMs.

Conformers with Transformer-XL relative positions (transformers' Wav2Vec2-Conformer ``relative``, ESPnet's and
NeMo's ``rel_pos``) score each query against a projection ``P`` of a sinusoidal table cut to the ``2T - 1``
distances ``T - 1 .. -(T - 1)``, and skew the ``[T, 2T - 1]`` products so that key ``j`` of query ``i`` reads
distance ``i - j``: a zero column, a view to ``[2T, T]``, a slice dropping the first row, a view back and a slice
of the first ``T`` columns. Those views have two symbolic sizes, which no XNNPACK 1.5.1 reshape takes, so at a
dynamic length every layer leaves the delegate twice. Inside a delegate a ``[T, T]`` tensor can only come from a
GEMM of fixed inner size or from broadcasting (see :mod:`clipped_relative_positions_as_one_hot_bmm`), and the
sinusoids give one: ``cos((i - j)w) = cos(iw)cos(jw) + sin(iw)sin(jw)`` and
``sin((i - j)w) = sin(iw)cos(jw) - cos(iw)sin(jw)``. When every row of ``P`` is ``U cos(rw) + V sin(rw)`` over the
table's frequencies ``w`` at distance ``r``, the shifted scores are::

    before

    table [N, C] ── slice(by T) ── linear ── view ── permute ── P [1, H, D, 2T - 1] ──┐
    q [1, H, T, D] ─────────────────────────────────────────────────────────────── matmul [1, H, T, 2T - 1]
        ── pad(1, 0) ── view [1, H, 2T, T] ── slice(2, 1) ── view [1, H, T, 2T - 1] ── slice(3, 0, T) ── [1, H, T, T]

    after

    cos [Tmax, G], sin [Tmax, G] (constants: cos(iw), sin(iw)) ── slice(0, 0, T) ── c, s [T, G]
    q ─┬─ matmul(U [1, H, D, G]) ── a ─┐
       └─ matmul(V [1, H, D, G]) ── b ─┴─ a c + b s ── matmul(ones [1, H, 1, 1] * cᵀ) ──┐
                                           a s - b c ── matmul(ones [1, H, 1, 1] * sᵀ) ──┴─ add ── [1, H, T, T]

``a[i] = q[i] U`` and ``b[i] = q[i] V`` hold each query's weight of each frequency's cosine and sine, and the two
GEMMs of inner size ``G`` (the table's frequencies) give every key's distance from every query at once. The
broadcast of the key side over the heads keeps every operand 4-D with the heads second, so that
:mod:`attention_heads_as_batch` takes it into the attention's 3-D region. No constant grows with the length
beyond ``Tmax`` rows of ``G`` cosines and sines. The GEMMs cost ``2G`` multiply-adds per score where the product
they replace costs ``2D`` (``D`` per entry of a ``[T, 2T - 1]`` grid): a table of ``C = 2G`` columns split into
``H`` heads of ``D = C / H`` costs ``H / 2`` times as much, the same at 2 heads and 8 times at 16 (see
:data:`MOST_FREQUENCIES_PER_HEAD_SIZE`).

The frequencies are read off the table: its columns come in pairs whose squares sum to a constant along the
positions and whose phase ``atan2`` grows linearly (interleaved or split layouts alike), each pair one frequency.
The table is a constant that ``P`` cuts by the length (Wav2Vec2-Conformer's buffer), or else the last value that
``P`` computes from the length before it reads a parameter (transformers' Parakeet computes ``sin`` and ``cos`` of
an ``arange`` of the distances on every call), read at the longest length.
``U`` and ``V`` are fitted (least squares, float64) to ``P`` computed at the longest length of the exported range,
the fit checked there, and ``P`` at the shortest length checked to be the same rows at the same distances. The
cosines and sines are computed in float64 from the fitted frequencies: more exact than the table, whose float32
``sin(position * w)`` carries an error of about ``|rw| 2⁻²⁴``; the result differs from eager by that much.

The pass leaves the shift as it is, and does nothing on a program without one, when the table has more than
:data:`MOST_FREQUENCIES_PER_HEAD_SIZE` frequencies per entry of a head (many heads: the GEMMs would cost more than
the skew saves), the chain is not exactly that (a zero ``pad(1, 0)``, or a ``cat`` after a zero column, of a
``[.., T, 2T - 1]`` float32 product, the views, the slices, each read only by the next), ``P`` is computed from
more than constants and the length, the length has no finite range of one symbol, or ``P``'s rows are not
sinusoids of the frequencies of a table they are computed from (one constant table cut by the length, or one
computed from it).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np
import sympy
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx.experimental.symbolic_shapes import statically_known_true

from audiodeploy.lowering.passes._graph import (
    FILL_VALUES,
    METADATA_CHECKS,
    RESHAPES,
    NodeRewritePass,
    Skip,
    add_constant,
    ancestors,
    arguments,
    evaluated_at,
    insert_op,
    is_pure,
    length_range,
    sizes_always,
    tensor_of,
    value,
)

aten = torch.ops.aten


PHASE_TOLERANCE = 2.0**-20
"""Largest departure of a pair's phase from a line, relative to ``1 + `` its largest phase: float32's
``sin(position * w)`` rounds the product, an error of up to ``2⁻²⁴`` of it."""

MOST_FREQUENCIES_PER_HEAD_SIZE = 2
"""The GEMMs cost ``2G`` multiply-adds per score, the product they replace ``2D`` per score (``2T - 1`` distances
of ``D``): past twice that, the delegate's extra arithmetic outweighs the skew's copies and the delegate's exits.
Measured on wav2vec2-conformer rel-pos-large (16 heads of 64, 512 frequencies: 8 times), 2 threads of an AMD
EPYC: one delegate instead of 122, as fast at 1 s and 26% slower at 10 s (ONNX Runtime's ratio 0.87 against
0.85, and 1.13 against 0.89)."""

FIT_TOLERANCE = 2.0**-18
"""Largest misfit of ``P``'s rows by sinusoids, relative to ``P``'s largest entry and to ``1 + |rw|`` at the
farthest distance ``r`` (the float32 table's own error grows with the phase). A table that is not sinusoidal
misses by a fraction of its size."""


class RelativeShiftOfSinusoidsAsGemmsPass(NodeRewritePass):
    targets = frozenset({aten.pad.default, aten.constant_pad_nd.default, aten.cat.default})

    def __init__(self, exported_program: ExportedProgram) -> None:
        super().__init__(exported_program)
        self._shared: dict[tuple[bytes, int, tuple[int, ...]], tuple[torch.fx.Node, ...]] = {}

    def rewrite(self, node: torch.fx.Node) -> dict[torch.fx.Node, torch.fx.Node] | Skip:
        shift = _skew_chain(node)
        if isinstance(shift, Skip):
            return shift
        product, chain = shift
        result = chain[-1]
        query, positions = product.args[0], product.args[1]
        q, p = value(query), value(positions)
        if q is None or p is None or q.dtype != torch.float32 or p.dtype != torch.float32 or p.dim() < 2:
            return Skip("its product is not of two float32 tensors")
        if not all(isinstance(size, int) for size in p.shape[:-1]):
            return Skip("its position side has a symbolic size besides the distances")
        length = tensor_of(product).shape[-2]
        lengths = length_range(self.exported_program, length)
        if isinstance(lengths, Skip):
            return lengths
        symbol, low, high = lengths
        computation = ancestors([positions], expand=lambda n: n not in self.constants and n.target != aten.sym_size.int)
        if any(
            n not in self.constants and n.op != "call_function" or (n.op == "call_function" and not is_pure(n.target))
            for n in computation
        ):
            return Skip("its position side is computed from more than constants and the length")
        order = [n for n in self.graph.nodes if n in computation]
        frequencies = self._table_frequencies(order, symbol, high)
        if isinstance(frequencies, Skip):
            return frequencies
        head_size = int(p.shape[-2])
        if len(frequencies) > MOST_FREQUENCIES_PER_HEAD_SIZE * head_size:
            return Skip(
                f"its {2 * len(frequencies)} products per score ({len(frequencies)} frequencies) would cost "
                f"{len(frequencies) / head_size:.0f} times the {2 * head_size} of the product it replaces, more than "
                "the skew outside the delegate costs"
            )
        fit = _fitted_sinusoids(
            positions,
            order,
            self.constants,
            symbol,
            (low, high),
            length,
            frequencies,
        )
        if isinstance(fit, Skip):
            return fit
        cosines, sines, longest = fit
        for check in [u for n in (node, *chain) for u in n.users if u.target in METADATA_CHECKS]:
            self.graph.erase_node(check)
        return {result: self._scores(result, query, p.shape[:-1], cosines, sines, frequencies, longest)}

    def _table_frequencies(self, order: list[torch.fx.Node], symbol: sympy.Symbol, longest: int) -> np.ndarray | Skip:
        """The frequencies of the table the position side is computed from (radians per row): a constant table
        that it cuts by the length, or else one that it computes from the length (``sin`` and ``cos`` of an
        ``arange`` of distances), read at the longest length."""
        cuts = [
            n
            for n in order
            if n.target == aten.slice.Tensor
            and n.args[0] in self.constants
            and not statically_known_true(
                tensor_of(n).shape[arguments(n)["dim"]] == tensor_of(n.args[0]).shape[arguments(n)["dim"]]
            )
        ]
        tables = {n.args[0] for n in cuts}
        if len(tables) > 1:
            return Skip(f"its position side cuts {len(tables)} constant tables by the length, not one")
        if tables:
            cut = cuts[0]
            table, dim = self.constants[cut.args[0]].double(), arguments(cut)["dim"]
        else:
            computed = self._computed_table(order)
            if computed is None:
                return Skip("its position side neither cuts a constant table by the length nor computes one from it")
            node, dim = computed
            table = evaluated_at(order, node, self.constants, symbol, longest).double()
        rows = table.movedim(dim, 0).reshape(table.shape[dim], -1).numpy()
        return _frequencies(rows)

    def _computed_table(self, order: list[torch.fx.Node]) -> tuple[torch.fx.Node, int] | None:
        """(the last value of ``order`` computed from the length and no parameter, its dimension of distances):
        the table that the position side projects with its parameters (transformers' Parakeet)."""
        parameters = {
            node
            for node, spec in zip(
                self.graph.find_nodes(op="placeholder"), self.exported_program.graph_signature.input_specs
            )
            if spec.kind == InputKind.PARAMETER
        }
        reads_parameters = set(parameters)
        for node in order:
            if any(a in reads_parameters for a in node.all_input_nodes):
                reads_parameters.add(node)
        for node in reversed(order):
            if (
                node in reads_parameters
                or node.op != "call_function"
                or not isinstance(node.meta.get("val"), torch.Tensor)
            ):
                continue
            symbolic = [d for d, size in enumerate(tensor_of(node).shape) if not isinstance(size, int)]
            if len(symbolic) == 1:
                return node, symbolic[0]
        return None

    def _scores(
        self,
        result: torch.fx.Node,
        query: torch.fx.Node,
        leading: torch.Size,
        cosines: torch.Tensor,
        sines: torch.Tensor,
        frequencies: np.ndarray,
        longest: int,
    ) -> torch.fx.Node:
        ep, graph = self.exported_program, self.graph

        def op(target, *args: object) -> torch.fx.Node:
            return insert_op(graph, target, args, origin=result)

        u = add_constant(ep, graph, f"{result.name}_cos_weights", cosines)
        v = add_constant(ep, graph, f"{result.name}_sin_weights", sines)
        c, s, keys_cos, keys_sin = self._positions(result, query, tuple(leading[:-1]), frequencies, longest)
        a = op(aten.matmul.default, query, u)
        b = op(aten.matmul.default, query, v)
        by_cos = op(aten.add.Tensor, op(aten.mul.Tensor, a, c), op(aten.mul.Tensor, b, s))
        by_sin = op(aten.sub.Tensor, op(aten.mul.Tensor, a, s), op(aten.mul.Tensor, b, c))
        return op(aten.add.Tensor, op(aten.matmul.default, by_cos, keys_cos), op(aten.matmul.default, by_sin, keys_sin))

    def _positions(
        self, result: torch.fx.Node, query: torch.fx.Node, batch: tuple[int, ...], frequencies: np.ndarray, longest: int
    ) -> tuple[torch.fx.Node, ...]:
        """The cosines and sines of the positions cut to the length, for the queries ``[T, G]`` and for the keys
        (``[*batch, G, T]``), made at the first shift and read by every later one with the same frequencies: every
        layer of a model cuts one table."""
        key = (frequencies.tobytes(), longest, batch)
        if key not in self._shared:
            ep, graph = self.exported_program, self.graph

            def op(target, *args: object) -> torch.fx.Node:
                return insert_op(graph, target, args, origin=result)

            phases = np.arange(longest)[:, None] * frequencies[None, :]
            cos_table = add_constant(ep, graph, f"{result.name}_cos", torch.from_numpy(np.cos(phases)).float())
            sin_table = add_constant(ep, graph, f"{result.name}_sin", torch.from_numpy(np.sin(phases)).float())
            heads = add_constant(ep, graph, f"{result.name}_heads", torch.ones([*batch, 1, 1]))
            n = op(aten.sym_size.int, query, tensor_of(query).dim() - 2)
            c, s = (op(aten.slice.Tensor, table, 0, 0, n) for table in (cos_table, sin_table))
            # Broadcast over the heads (a multiply, which the delegate computes): every operand of the key-side GEMMs
            # 4-D with the heads second, as attention_heads_as_batch takes a region.
            keys = (op(aten.mul.Tensor, heads, op(aten.permute.default, x, [1, 0])) for x in (c, s))
            self._shared[key] = (c, s, *keys)
        return self._shared[key]


def _padded_product(pad: torch.fx.Node) -> torch.fx.Node | Skip:
    """What ``pad`` puts a zero column before: ``pad(x, [1, 0])`` (NeMo's, transformers') or
    ``cat([zeros, x], -1)`` (ESPnet's)."""
    given = arguments(pad)
    if pad.target == aten.cat.default:
        tensors = given["tensors"]
        if len(tensors) != 2 or given["dim"] not in (-1, tensor_of(pad).dim() - 1):
            return Skip("it is not a zero column before the first")
        column, product = tensors
        if column.target not in FILL_VALUES or FILL_VALUES[column.target](arguments(column)) != 0:
            return Skip("it is not a zero column before the first")
        if not sizes_always(operator.eq, tensor_of(column).shape[-1], 1):
            return Skip("it is not a zero column before the first")
        return product
    if list(given["pad"]) != [1, 0] or (given.get("value") or 0) != 0 or given.get("mode", "constant") != "constant":
        return Skip("it is not a zero column before the first")
    return given["input"]


def _skew_chain(pad: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | Skip:
    """(the product, the shift's four nodes after ``pad``, the last slice last) of a relative shift starting at
    ``pad``."""
    product = _padded_product(pad)
    if isinstance(product, Skip):
        return product
    if not isinstance(product, torch.fx.Node) or product.target != aten.matmul.default:
        return Skip("what it pads is not a matmul")
    x = value(product)
    if x is None or x.dim() < 3:
        return Skip("what it pads is not a batch of matrices")
    rank, rows, columns = x.dim(), x.shape[-2], x.shape[-1]
    if not sizes_always(operator.eq, columns, 2 * rows - 1):
        return Skip("what it pads is not [T, 2T - 1]")
    if len(product.users) != 1:
        return Skip("something else reads a step of the shift")
    chain = []
    node = pad
    for expected in ("reshape", "slice", "reshape", "slice"):
        users = [u for u in node.users if u.target not in METADATA_CHECKS]
        if len(users) != 1:
            return Skip("something else reads a step of the shift")
        (node,) = users
        if (expected == "reshape") != (node.target in RESHAPES) or (
            expected == "slice" and node.target != aten.slice.Tensor
        ):
            return Skip(f"it is not followed by the shift's {expected}")
        chain.append(node)
    wide, dropped, back, result = chain
    shape = tensor_of(wide).shape
    if not (
        _same_sizes(shape[:-2], x.shape[:-2])
        and sizes_always(operator.eq, shape[-2], columns + 1)
        and sizes_always(operator.eq, shape[-1], rows)
    ):
        return Skip("its first view is not [2T, T]")
    first = arguments(dropped)
    if first["dim"] % rank != rank - 2 or first["start"] != 1 or first.get("step", 1) != 1:
        return Skip("its first slice does not drop the first row")
    if not sizes_always(operator.eq, tensor_of(dropped).shape[-2], columns):
        return Skip("its first slice does not keep the other rows")
    if not _same_sizes(tensor_of(back).shape, x.shape):
        return Skip("its second view is not the product's shape")
    last = arguments(result)
    if last["dim"] % rank != rank - 1 or (last["start"] or 0) != 0 or last.get("step", 1) != 1:
        return Skip("its last slice is not the first columns")
    if not sizes_always(operator.eq, tensor_of(result).shape[-1], rows):
        return Skip("its last slice does not keep T columns")
    return product, chain


def _same_sizes(a: Sequence[int | torch.SymInt], b: Sequence[int | torch.SymInt]) -> bool:
    return len(a) == len(b) and all(sizes_always(operator.eq, m, n) for m, n in zip(a, b))


def _frequencies(rows: np.ndarray) -> np.ndarray | Skip:
    """The frequency of each pair of sinusoid columns of ``rows`` ([positions, columns]), radians per position."""
    count, columns = rows.shape
    if columns % 2 or count < 4:
        return Skip("its table's columns do not pair up")
    samples = np.unique(np.geomspace(1, count, num=min(count, 24)).astype(int) - 1)
    low = np.full((columns, columns), np.inf)
    high = np.full((columns, columns), -np.inf)
    for squares in rows[samples] ** 2:
        sums = squares[:, None] + squares[None, :]
        np.minimum(low, sums, out=low)
        np.maximum(high, sums, out=high)
    spread = high - low  # of each pair's sum of squares along the positions
    np.fill_diagonal(spread, np.inf)
    partner = spread.argmin(axis=1)
    if np.any(partner[partner] != np.arange(columns)):
        return Skip("its table's columns do not pair up")
    frequencies = []
    for first in range(columns):
        second = int(partner[first])
        if second < first:
            continue
        cosine, sine = rows[:, first], rows[:, second]
        radius = np.hypot(cosine, sine)
        if radius.min() <= 0 or np.ptp(radius) > 1e-5 * radius.max():
            return Skip("its table's columns are not sinusoids: a pair's squares do not sum to a constant")
        phase = np.unwrap(np.arctan2(sine, cosine))
        steps = np.arange(count, dtype=np.float64)
        slope, offset = np.polyfit(steps, phase, 1)
        if np.abs(phase - (slope * steps + offset)).max() > PHASE_TOLERANCE * (1 + np.abs(phase).max()):
            return Skip("its table's columns are not sinusoids: a pair's phase does not grow linearly")
        frequencies.append(abs(slope))
    return np.array(frequencies)


def _fitted_sinusoids(
    positions: torch.fx.Node,
    order: list[torch.fx.Node],
    constants: dict[torch.fx.Node, torch.Tensor],
    symbol: sympy.Symbol,
    bounds: tuple[int, int],
    length: torch.SymInt,
    frequencies: np.ndarray,
) -> tuple[torch.Tensor, torch.Tensor, int] | Skip:
    """``U``, ``V`` ([..., D, G]) with ``P[..., k] = U cos(rw) + V sin(rw)`` at ``r = T - 1 - k``, and the longest
    ``T``."""
    lengths = [int(sympy.sympify(length.node.expr).subs(symbol, bound)) for bound in bounds]
    shortest, longest = (evaluated_at(order, positions, constants, symbol, bound).double() for bound in bounds)
    distances = np.arange(lengths[1] - 1, -lengths[1], -1, dtype=np.float64)
    phases = distances[:, None] * frequencies[None, :]
    basis = np.concatenate([np.cos(phases), np.sin(phases)], axis=1)  # [2T - 1, 2G]
    rows = longest.reshape(-1, longest.shape[-1]).numpy().T  # [2T - 1, M]
    weights, *_ = np.linalg.lstsq(basis, rows, rcond=1e-12)
    scale = float(np.abs(rows).max()) or 1.0
    tolerance = FIT_TOLERANCE * scale * (1 + float(np.abs(phases).max()))
    if np.abs(basis @ weights - rows).max() > tolerance:
        return Skip("its position side is not sinusoids of its table's frequencies")
    skip = lengths[1] - lengths[0]
    if not torch.allclose(shortest, longest[..., skip : skip + shortest.shape[-1]], rtol=0, atol=tolerance):
        return Skip("its position side at the shortest length is not the same distances' rows")
    groups = len(frequencies)
    per_row = torch.from_numpy(weights.T.copy()).reshape(*longest.shape[:-1], 2 * groups)
    return per_row[..., :groups].float().contiguous(), per_row[..., groups:].float().contiguous(), lengths[1]
