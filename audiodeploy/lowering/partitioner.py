"""The XNNPACK partitioner audiodeploy lowers with, and the reasons it gives.

Stock ``XnnpackPartitioner`` with corrections to its configs, each a case
where 1.5.1 delegates what XNNPACK then computes wrongly or refuses to load:

- 1.5.1's addmm lowering ignores ``alpha`` and ``beta``, so
  ``torch.addmm(b, x, w, alpha=2, beta=3)`` would be delegated and return wrong
  results; :class:`DefaultScaleAddmmConfig` declines it;
- no config checks tensor rank, and XNNPACK has at most 6 dimensions;
  every config is wrapped by :class:`_WithinXnnpackRank`;
- XNNPACK's static reshape infers at most one dynamic size, and 1.5.1's
  ``unsqueeze_copy`` config does not check it: a ``[T, T]`` value unsqueezed at a
  dynamic ``T`` is delegated and preprocessing then fails ("reshape only supports
  1 dynamic dimension"), failing the whole lowering;
  :class:`OneDynamicSizeUnsqueezeCopyConfig` and :class:`OneDynamicSizeViewCopyConfig`
  decline such a reshape, which then runs on the portable kernel;
- 1.5.1's GELU lowering ignores ``approximate``: ``F.gelu(x, approximate="tanh")``
  is delegated and computed as the erf GELU (2e-4 off near ``x = -2``);
  :class:`ExactGeluConfig` declines it, and the rewrite
  :mod:`~audiodeploy.lowering.passes.tanh_gelu_as_tanh` writes it in ops XNNPACK delegates.

And one config 1.5.1 leaves out: its ``EluConfig`` is commented out of
``ALL_PARTITIONER_CONFIGS`` ("waiting for PyTorch pin update"), so every ELU
(EnCodec, Mimi, DAC) cuts the delegate, while XNNPACK and the 1.5.1 runtime
compute it; :class:`UnitScaleEluConfig` delegates it where its node visitor
computes what was asked (SELU's ``scale`` it ignores).

These fixes apply to every lowering, ``fold=False`` included: a wrong result is
never a useful baseline.

With ``merge_partitions=True`` (quantized programs), partitions are merged after 1.5.1's
partitioner proposes them, see :func:`merge_acyclic_partitions`.

One change that leaves the program as it was and makes lowering about a fifth faster: given a
filter for the ops it keeps whole, 1.5.1's edge lowering decomposes the graph three times; without
one, once. :meth:`ExplainingXnnpackPartitioner.ops_to_not_decompose` leaves the filter out where it
cannot change what is kept (every node passes it, and no op left to decompose can make one).

1.5.1 explains each declined node only in a DEBUG log record
(``WhyNoPartition``); :func:`capture_decline_reasons` collects those records while
a lowering runs, so the report can say why a GEMM stayed outside the delegates.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

import torch
from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
from executorch.backends.xnnpack.partition.config.gemm_configs import AddmmConfig
from executorch.backends.xnnpack.partition.config.generic_node_configs import (
    EluConfig,
    GeluConfig,
    UnsqueezeCopyConfig,
    ViewCopyConfig,
)
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir.backend.partitioner import PartitionResult
from executorch.exir.backend.utils import WhyNoPartition
from executorch.exir.dialects.edge._ops import EdgeOpOverload
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import free_symbols
from torch.fx.passes.infra.partitioner import Partition
from torch.fx.passes.utils.fuser_utils import validate_partition

_logger = logging.getLogger(__name__)
_why = WhyNoPartition(logger=_logger)

# Loggers whose DEBUG records carry WhyNoPartition reasons.
_REASON_LOGGERS = ("executorch.backends.xnnpack.partition", __name__)


class DefaultScaleAddmmConfig(AddmmConfig):
    """addmm, delegated only when ``alpha == beta == 1`` (what XNNPACK computes)."""

    def check_constraints(self, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        alpha = node.kwargs.get("alpha", 1)
        beta = node.kwargs.get("beta", 1)
        if alpha != 1 or beta != 1:
            _why(node, f"XNNPACK's addmm ignores alpha and beta (alpha={alpha}, beta={beta})")
            return False
        return super().check_constraints(node, ep)


class ExactGeluConfig(GeluConfig):
    """gelu, delegated only as the erf GELU: 1.5.1's node visitor writes every GELU as XNNPACK's erf GELU."""

    def check_constraints(self, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        if approximate != "none":
            _why(node, f"XNNPACK 1.5.1 computes every GELU as the erf GELU, this one is approximate={approximate!r}")
            return False
        return super().check_constraints(node, ep)


class UnitScaleEluConfig(EluConfig):
    """elu, delegated when ``scale == input_scale == 1`` and ``alpha`` is given (what the node visitor reads).

    1.5.1's ``ELUVisitor`` passes ``node.args[1]`` as XNNPACK's alpha and nothing else: SELU, which edge
    lowering writes as ``elu(x, alpha, scale=1.0507)``, would be computed without its scale.
    """

    def check_constraints(self, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        if len(node.args) < 2:
            _why(node, "XNNPACK's ELU reads alpha as the op's second argument, and this call passes none")
            return False
        given = dict(zip(("alpha", "scale", "input_scale"), node.args[1:])) | dict(node.kwargs)
        scales = (given.get("scale", 1), given.get("input_scale", 1))
        if scales != (1, 1):
            _why(node, f"XNNPACK's ELU has alpha only, this one scales (scale, input_scale) = {scales}")
            return False
        return super().check_constraints(node, ep)


class _AtMostOneDynamicSize:
    """Declines a reshape whose output has more than one size that depends on the input length.

    XNNPACK's static reshape takes the output shape with one size left to infer at run time;
    1.5.1's node visitors refuse two (``op_squeeze.py``, ``op_view_copy.py``) when the delegate
    is built, after the partitioner took the op, and the whole lowering fails. Declined here,
    the reshape runs on the portable kernel and the rest is delegated as usual.
    """

    def check_constraints(self, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        out = node.meta.get("val")
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else ()
        # free_symbols, as the visitors count them: a size the export fixed is no longer dynamic.
        dynamic = [size for size in shape if free_symbols(size)]
        if len(dynamic) > 1:
            sizes = ", ".join(str(size) for size in shape)
            _why(
                node,
                f"XNNPACK's reshape infers at most one dynamic size, this output ({sizes}) has {len(dynamic)}",
            )
            return False
        return super().check_constraints(node, ep)  # type: ignore[misc]


class OneDynamicSizeViewCopyConfig(_AtMostOneDynamicSize, ViewCopyConfig):
    """view_copy, delegated only when its output has at most one dynamic size.

    1.5.1 declines a view with two already, as a "Symbolic reshape" or with "invalid dtype" (a
    size that is a node, not a number); this says why in terms of the shape.
    """


class OneDynamicSizeUnsqueezeCopyConfig(_AtMostOneDynamicSize, UnsqueezeCopyConfig):
    """unsqueeze_copy, delegated only when its output has at most one dynamic size.

    The case that fails stock 1.5.1: a ``[T, T]`` relative-distance value unsqueezed for a
    broadcast (an ``einsum`` over relative position embeddings) at a dynamic ``T``.
    """


# XNN_MAX_TENSOR_DIMS: XNNPACK cannot define a tensor of more dimensions.
XNNPACK_MAX_RANK = 6


def _max_rank(node: torch.fx.Node) -> int:
    values = [node.meta.get("val")] + [arg.meta.get("val") for arg in node.all_input_nodes]
    flat = [v for value in values for v in (value if isinstance(value, (tuple, list)) else (value,))]
    return max((v.dim() for v in flat if isinstance(v, torch.Tensor)), default=0)


class _WithinXnnpackRank:
    """Declines an op whose inputs or outputs have more dimensions than XNNPACK supports.

    1.5.1's configs do not check it: a 7-D permute (UnivNet's location-variable
    convolution) is partitioned, and the program then fails at load time with
    ``Failed to define tensor ... xnn_status_unsupported_parameter``.
    """

    def check_constraints(self, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        rank = _max_rank(node)
        if rank > XNNPACK_MAX_RANK:
            _why(node, f"XNNPACK tensors have at most {XNNPACK_MAX_RANK} dimensions, this op has {rank}")
            return False
        return super().check_constraints(node, ep)  # type: ignore[misc]


def _within_rank(config: type) -> type:
    return type(config.__name__, (_WithinXnnpackRank, config), {"__doc__": config.__doc__})


_CORRECTED_CONFIGS: dict[type, type] = {
    AddmmConfig: DefaultScaleAddmmConfig,
    ViewCopyConfig: OneDynamicSizeViewCopyConfig,
    UnsqueezeCopyConfig: OneDynamicSizeUnsqueezeCopyConfig,
    GeluConfig: ExactGeluConfig,
}

PARTITIONER_CONFIGS = [
    _within_rank(_CORRECTED_CONFIGS.get(config, config)) for config in [*ALL_PARTITIONER_CONFIGS, UnitScaleEluConfig]
]


_aten = torch.ops.aten
_DECOMPOSED_INTO_OTHER_OPS = frozenset(
    {
        *(_aten.conv1d.default, _aten.conv2d.default, _aten.conv_transpose1d.default, _aten.pad.default),
        *(_aten.matmul.default, _aten.baddbmm.default, _aten.softmax.int, _aten.silu.default, _aten.clip.default),
        *(_aten.clamp_min.default, _aten.rsub.Scalar, _aten.__and__.Tensor, _aten.type_as.default),
        *(_aten.transpose.int, _aten.squeeze.dim, _aten.unbind.int, _aten.broadcast_tensors.default),
        *(_aten.reshape.default, _aten.t.default, _aten.arange.start, _aten.zeros.default, _aten.sym_size.int),
        *(_aten.sum.default, _aten._weight_norm.default, _aten._assert_tensor_metadata.default),
    }
)
"""Ops not in core ATen, found in the programs lowered here, whose decomposition makes convolutions, matrix
products, elementwise, data-movement or factory ops (or nothing), and never an op XNNPACK keeps whole (see
`ExplainingXnnpackPartitioner.ops_to_not_decompose`). ``aten.lstm`` is not one: it decomposes into
``aten.linear``."""


def _decomposed(op: torch._ops.OpOverload) -> bool:
    """Whether edge lowering may decompose `op`: an ATen op outside core ATen. The quantization libraries' ops
    (``quantized_decomposed``, ``torchao``) it keeps, as ExecuTorch's own ops."""
    return op.namespace == "aten" and torch.Tag.core not in op.tags


class ExplainingXnnpackPartitioner(XnnpackPartitioner):
    """XNNPACK partitioner that keeps, after ``partition()``, why it declined each node.

    Use one instance per method: ``decline_reasons`` maps node names of the last
    partitioned program to the reasons given. ``merge_partitions`` merges the proposed
    partitions wherever that makes no cycle (:func:`merge_acyclic_partitions`).
    """

    def __init__(self, merge_partitions: bool = False) -> None:
        super().__init__(configs=PARTITIONER_CONFIGS)
        self.decline_reasons: dict[str, list[str]] = {}
        self.merge_partitions = merge_partitions

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        """The ops edge lowering keeps whole for XNNPACK (``aten.linear``, ``aten.elu``, ...), and the filter that
        says which of their nodes to keep, left out where it would keep every node.

        Given a filter, 1.5.1's ``to_edge_transform_and_lower`` decomposes the program twice more: once keeping
        those ops whole, to filter the nodes it then has, and again (a fifth of a tiny speech encoder's lowering
        time). Without one, it keeps every node of those ops and decomposes once. Both ways give the same program
        when every node of those ops passes the filter, and no node left to decompose makes a new one; so the
        filter is left out only when each op to decompose is one of `_DECOMPOSED_INTO_OTHER_OPS` (SELU, say,
        decomposes into an ``aten.elu`` with a scale, which XNNPACK declines).
        """
        ops, keeps = super().ops_to_not_decompose(ep)
        if keeps is None:
            return ops, None
        kept_whole = set(ops)
        for node in ep.graph.nodes:
            # 1.5.1 asks again once the program is lowered, to check what it kept whole: its ops are edge ops then.
            op = node.target._op if isinstance(node.target, EdgeOpOverload) else node.target
            if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
                continue
            if op in kept_whole:
                if not keeps(node):
                    return ops, keeps
            elif _decomposed(op) and op not in _DECOMPOSED_INTO_OTHER_OPS:
                return ops, keeps
        return ops, None

    def generate_partitions(self, ep: ExportedProgram) -> list[Partition]:
        partitions = super().generate_partitions(ep)
        return merge_acyclic_partitions(partitions) if self.merge_partitions else partitions

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        with capture_decline_reasons() as reasons:
            result = super().partition(exported_program)
        self.decline_reasons = reasons
        return result


def merge_acyclic_partitions(partitions: list[Partition]) -> list[Partition]:
    """Merge partitions pairwise, in graph order, while some merge makes no cycle; until none does.

    1.5.1's ``GroupBasedPartitioner`` tries each pair once. A dynamically quantized linear is a
    group that includes its input's ``choose_qparams``, shared by q, k and v: such groups span
    a wide stretch of the graph, the single pass cannot merge past them, and a quantized
    transformer comes out as one delegate per layer with nothing between them. Merging two
    partitions is valid when no path leaves one and re-enters the other (``validate_partition``);
    on a program whose partitions cannot merge this changes nothing.
    """
    merged = [set(p.nodes) for p in partitions if p.size() > 0]
    changed = True
    while changed and len(merged) > 1:
        changed = False
        for i in range(len(merged)):
            for j in range(i + 1, len(merged)):
                union = merged[i] | merged[j]
                if validate_partition(list(union)):
                    merged[i] = union
                    del merged[j]
                    changed = True
                    break
            if changed:
                break
    return [Partition(id=index, nodes=nodes) for index, nodes in enumerate(merged)]


class _ReasonCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.reasons: dict[str, list[str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        why = record.msg
        # WhyNoPartition is reused for every node: read it now, not later.
        if isinstance(why, WhyNoPartition) and why.node is not None:
            node_reasons = self.reasons.setdefault(why.node.name, [])
            if why.reason not in node_reasons:
                node_reasons.append(why.reason)


@contextlib.contextmanager
def capture_decline_reasons() -> Iterator[dict[str, list[str]]]:
    """Collect node name -> reasons the partitioner declined it, without printing them."""
    collector = _ReasonCollector()
    saved = []
    for name in _REASON_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # keep DEBUG records out of the root handlers
        logger.addHandler(collector)
    try:
        yield collector.reasons
    finally:
        for logger, level, propagate in saved:
            logger.removeHandler(collector)
            logger.setLevel(level)
            logger.propagate = propagate
