"""Write a constant padding by an amount that depends on the length as a concatenation with a filled block.

SEW pads its upsampled frames back to the input's frame count: ``F.pad(x, (0, 0, 0, T - 2 * (T // 2)))``, by
zero or one frame depending on the length. ExecuTorch 1.5.1's XNNPACK partitioner takes ``constant_pad_nd`` only
with amounts it can read as integers, so a padding by a size runs outside and cuts the delegate in two (before it,
the encoder; after it, the head). The padded tensor is the input beside a block of the fill value; the block's
shape is sizes alone, so ``full`` makes it outside the delegate from the input's sizes before anything runs (the
amount is read from the program's input by :class:`SizesReadFromInputsPass`), and the concatenation, along a
dynamic length too, is XNNPACK's::

    before                                       after

    x [.., T, C] ── constant_pad_nd([0, 0, l, r], v)       full([.., l, C], v) ─┐
                    ── [.., l + T + r, C]                   x ──────────────────┼─ cat(-2) ── [.., l + T + r, C]
                                                            full([.., r, C], v) ─┘

A block of zero rows (an amount that is zero at the length it runs at) is an empty operand of the concatenation,
which XNNPACK's concatenation takes. But ExecuTorch 1.5.1 drops an operand of a concatenation that is empty at the
export's example (``PruneEmptyTensorsPass`` judges its size there), so a padding by an amount that is zero at the
example is left as it is: SEW exported at an even number of frames keeps its padding outside the delegate.

The pass leaves a padding as it is, and does nothing on a program without one, unless it pads one dimension only
(every other amount zero), at least one of its two amounts is a size that is never negative over the export's
range (a negative one crops) and none is zero at the example, and the tensor is floating point. A padding by
integers alone is XNNPACK's own.
"""

from __future__ import annotations

import operator

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Skip, insert_op, sizes_always, tensor_of

aten = torch.ops.aten


class PaddingBySizeAsConcatPass(NodeRewritePass):
    targets = frozenset({aten.constant_pad_nd.default, aten.pad.default})

    def rewrite(self, node: torch.fx.Node) -> torch.fx.Node | Skip:
        x, pads = node.args[0], list(node.args[1])
        if node.target == aten.pad.default:
            mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
            if mode != "constant":
                return Skip(f"a {mode} padding")
            value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value")
        else:
            value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value")
        value = 0.0 if value is None else value
        if not isinstance(x, torch.fx.Node):
            return Skip("not a padding of a tensor")
        amounts = [p.meta["val"] if isinstance(p, torch.fx.Node) else p for p in pads]
        if all(isinstance(a, int) for a in amounts):
            return Skip("its amounts are integers: XNNPACK pads by them")
        padded = [i for i in range(0, len(amounts), 2) if not all(_is_zero(a) for a in amounts[i : i + 2])]
        if len(padded) != 1:
            return Skip("it pads more than one dimension")
        source = tensor_of(x)
        if not source.dtype.is_floating_point:
            return Skip(f"a {source.dtype} tensor: the fill is written as a float block")
        (first,) = padded
        dim = source.dim() - 1 - first // 2  # the amounts list the last dimension first
        sides = amounts[first : first + 2]
        if not all(sizes_always(operator.ge, a, 0) for a in sides):
            return Skip("an amount may be negative (a crop) at some length of the export's range")
        if any(isinstance(a, torch.SymInt) and a.node.hint == 0 for a in sides):
            # ExecuTorch 1.5.1's PruneEmptyTensorsPass drops a concatenation's operand that is empty at the example
            # (its numel is judged at the example's sizes), which would drop the block at every length.
            return Skip("an amount is 0 at the example: ExecuTorch would drop the block from the concatenation")
        parts: list[torch.fx.Node] = [x]
        for amount, side, at_end in zip(pads[first : first + 2], sides, (False, True), strict=True):
            if _is_zero(side):
                continue
            shape = [amount if i == dim else _size_of(x, i, origin=node, graph=self.graph) for i in range(source.dim())]
            block = insert_op(
                self.graph,
                aten.full.default,
                (shape, value),
                {"dtype": source.dtype, "device": source.device},
                origin=node,
            )
            parts.insert(len(parts) if at_end else 0, block)
        return insert_op(self.graph, aten.cat.default, (parts, dim), origin=node)


def _is_zero(amount: int | torch.SymInt) -> bool:
    return isinstance(amount, int) and amount == 0


def _size_of(x: torch.fx.Node, dim: int, *, origin: torch.fx.Node, graph: torch.fx.Graph) -> int | torch.fx.Node:
    """``x``'s size along ``dim``: the integer when it is one, else a ``sym_size`` node."""
    size = tensor_of(x).shape[dim]
    if isinstance(size, int):
        return size
    return insert_op(graph, aten.sym_size.int, (x, dim), origin=origin)
