"""Fold a GEMM's computed weight (and bias) into one constant.

ExecuTorch 1.5.1's XNNPACK partitioner delegates a convolution, linear, addmm or
mm only when its weight and bias are static parameters. A weight computed from
parameters (``weight_norm``, ``spectral_norm``, ``A * 2``) makes it decline the
GEMM, which then runs on the portable kernels together with its weight
computation. This pass replaces such a computation by the tensor it produces,
registered as a parameter of the program::

    before                                        after

    g ──┐                                         conv.weight (parameter, contiguous)
    v ──┴─ _weight_norm ─┐                                    │
                 x ──────┴─ conv1d ── y           x ── conv1d ┴─ y
             bias ───────┘                     bias ──┘

It works on the ATen program that ``torch.export`` returns, before edge
decomposition: whether ``linear`` survives to the partitioner depends on its
weight being a parameter, so folding later would be too late.

The pass is split in two so that the caller can decide which folds to apply:
:func:`plan_folds` finds the candidates and rejects, each with its reason, every
fold that could not replace its computation outright; :func:`apply_folds` builds
a new program with a chosen subset applied (the input program is not changed).

A candidate is rejected, and the pass leaves its GEMM as it is, when

* the computation reads a buffer the method mutates, or uses an op that is not a
  pure function of its inputs (random, in-place);
* a source or an intermediate is used by anything but the computation (another
  op, another GEMM, or the GEMM itself in another slot): freeing it would change
  the program, and keeping it would store it twice;
* the folded tensors are larger than the sources they free (a low-rank ``A @ B``);
* a source is tagged for an external data file (.ptd): the user asked for those
  bytes to live outside the program.

A GEMM whose weight depends on a user input (attention's ``q @ k``) is no
candidate. The pass does nothing on a program whose GEMMs all take parameters
directly.

Unlike the rewrites, the fold is not a :class:`~audiodeploy.lowering.passes._graph.NodeRewritePass`: the lowering
plans it once, lowers, and applies it again without the folds XNNPACK still declined (each then reported with
XNNPACK's reason), so planning and applying are two functions over a plan, and :func:`apply_folds` works on a copy
of the program that each try starts from.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    TensorArgument,
)

from audiodeploy.lowering.passes._gemms import gemm_label, module_path, static_slots
from audiodeploy.lowering.passes._graph import evaluate, external_data_tag, is_pure

aten = torch.ops.aten


@dataclass(frozen=True)
class FoldCandidate:
    """One GEMM whose computed weight and/or bias can be replaced by constants."""

    gemm: str
    """Name of the GEMM node in the exported program."""
    gemm_label: str
    """``op @ module.path``, for people."""
    roots: tuple[tuple[str, str], ...]
    """(slot name, node name) of each computed argument that is folded."""
    computation: tuple[str, ...]
    """Nodes of the computation, in graph order."""
    sources: tuple[str, ...]
    """Placeholder (or get_attr) nodes the computation reads; freed by the fold."""
    source_targets: tuple[str, ...]
    """State-dict names of the sources."""
    bytes_freed: int
    bytes_written: int


@dataclass(frozen=True)
class FoldRejection:
    gemm: str
    gemm_label: str
    reason: str


@dataclass(frozen=True)
class FoldPlan:
    candidates: tuple[FoldCandidate, ...]
    rejections: tuple[FoldRejection, ...]


@dataclass(frozen=True)
class AppliedFold:
    candidate: FoldCandidate
    constants: tuple[tuple[str, str], ...]
    """(placeholder name, state-dict target) of each constant written."""


def _nbytes(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    return int(val.numel()) * val.element_size()


class _Reject(Exception):
    pass


def _mutated_buffers(ep: ExportedProgram) -> set[str]:
    return set(ep.graph_signature.buffers_to_mutate.values())


def _is_constant_source(ep: ExportedProgram, node: torch.fx.Node) -> bool:
    """Parameters, buffers, lifted constants and attributes: data the program holds, not inputs."""
    return node.op == "get_attr" or is_param(ep, node) or is_buffer(ep, node) or is_lifted_tensor_constant(ep, node)


def _input_dependent(ep: ExportedProgram) -> set[torch.fx.Node]:
    """Every node whose value depends on a user input (so not a weight computation)."""
    dependent: set[torch.fx.Node] = set()
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            if not _is_constant_source(ep, node):
                dependent.add(node)
        elif any(arg in dependent for arg in node.all_input_nodes):
            dependent.add(node)
    return dependent


def _collect(
    ep: ExportedProgram, roots: Sequence[torch.fx.Node], mutated: set[str]
) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """Computation and source nodes behind ``roots``, which depend on no user input.

    Raises _Reject when the computation cannot be folded.
    """
    computation: set[torch.fx.Node] = set()
    sources: set[torch.fx.Node] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in computation or node in sources:
            continue
        if node.op in ("placeholder", "get_attr"):
            if is_buffer(ep, node) and ep.graph_signature.inputs_to_buffers[node.name] in mutated:
                raise _Reject(
                    f"it reads buffer `{ep.graph_signature.inputs_to_buffers[node.name]}`, which this method mutates"
                )
            sources.add(node)
            continue
        if node.op != "call_function" or not is_pure(node.target):
            raise _Reject(f"`{node.name}` ({node.target}) is not a pure function of its inputs")
        computation.add(node)
        stack.extend(node.all_input_nodes)
    order = {n: i for i, n in enumerate(ep.graph.nodes)}
    return sorted(computation, key=order.__getitem__), sorted(sources, key=order.__getitem__)


def _check_exclusive(
    gemm: torch.fx.Node,
    roots: dict[torch.fx.Node, int],
    computation: list[torch.fx.Node],
    sources: list[torch.fx.Node],
) -> None:
    """Every node of the fold must be used only inside it, each root only by the GEMM."""
    inside = set(computation)
    for node in [*computation, *sources]:
        for user in node.users:
            if user in inside:
                if node in roots:
                    raise _Reject(
                        f"intermediate `{node.name}` feeds the GEMM and also the computation of its other argument"
                    )
                continue
            if user is gemm:
                slots = [i for i, a in enumerate(gemm.args) if a is node]
                if node in roots and slots == [roots[node]] and node not in gemm.kwargs.values():
                    continue
                what = "source" if node in sources else "intermediate"
                raise _Reject(f"{what} `{node.name}` is also another input of the GEMM")
            if static_slots(user):
                raise _Reject(f"`{node.name}` is shared with another GEMM `{user.name}`")
            raise _Reject(f"`{node.name}` is also used by `{user.name}` outside the weight computation")


def plan_folds(ep: ExportedProgram) -> FoldPlan:
    """Find every GEMM with a computed weight or bias and decide whether it can be folded."""
    mutated = _mutated_buffers(ep)
    input_dependent = _input_dependent(ep)
    candidates: list[FoldCandidate] = []
    rejections: list[FoldRejection] = []
    for gemm in ep.graph.nodes:
        slots = static_slots(gemm)
        roots = {
            arg: index
            for index, arg in enumerate(gemm.args)
            if index in slots
            and isinstance(arg, torch.fx.Node)
            and arg.op == "call_function"
            and arg not in input_dependent  # an activation, not a weight
        }
        if not roots:
            continue
        label = gemm_label(gemm)
        try:
            computation, sources = _collect(ep, list(roots), mutated)
            for source in sources:
                tag = external_data_tag(source)
                if tag:
                    raise _Reject(f"source `{source.name}` is tagged for external data `{tag}`")
            _check_exclusive(gemm, roots, computation, sources)
            written = sum(_nbytes(root) for root in roots)
            freed = sum(_nbytes(source) for source in sources)
            if written > freed:
                raise _Reject(f"folding would grow the program: it writes {written} bytes and frees {freed}")
        except _Reject as rejection:
            rejections.append(FoldRejection(gemm.name, label, str(rejection)))
            continue
        candidates.append(
            FoldCandidate(
                gemm=gemm.name,
                gemm_label=label,
                roots=tuple((slots[index], root.name) for root, index in sorted(roots.items(), key=lambda kv: kv[1])),
                computation=tuple(n.name for n in computation),
                sources=tuple(n.name for n in sources),
                source_targets=tuple(_source_target(ep, n) for n in sources),
                bytes_freed=freed,
                bytes_written=written,
            )
        )
    return FoldPlan(tuple(candidates), tuple(rejections))


def _source_target(ep: ExportedProgram, node: torch.fx.Node) -> str:
    if node.op == "get_attr":
        return str(node.target)
    sig = ep.graph_signature
    for mapping in (sig.inputs_to_parameters, sig.inputs_to_buffers, sig.inputs_to_lifted_tensor_constants):
        if node.name in mapping:
            return mapping[node.name]
    raise KeyError(node.name)


def _source_value(ep: ExportedProgram, node: torch.fx.Node) -> torch.Tensor:
    if node.op == "get_attr":
        return getattr(ep.graph_module, str(node.target))
    target = _source_target(ep, node)
    if target in ep.state_dict:
        return ep.state_dict[target]
    return ep.constants[target]


def _evaluate(ep: ExportedProgram, candidate: FoldCandidate) -> dict[str, torch.Tensor]:
    """Run the computation on the real tensors; returns root name -> folded tensor."""
    nodes = {n.name: n for n in ep.graph.nodes}
    known = {nodes[s]: _source_value(ep, nodes[s]) for s in candidate.sources}
    values = evaluate([nodes[name] for name in candidate.computation], known)
    folded = {}
    for _, root in candidate.roots:
        value = values[nodes[root]]
        assert isinstance(value, torch.Tensor)
        # Contiguous and owning its storage: 1.5.1's XNNPACK serializer hashes a
        # constant's whole storage, so a view of a larger tensor is written wrong.
        folded[root] = value.detach().clone(memory_format=torch.contiguous_format)
    return folded


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    index = 1
    while f"{name}_folded{'' if index == 1 else index}" in taken:
        index += 1
    return f"{name}_folded{'' if index == 1 else index}"


def _copy_graph_module(ep: ExportedProgram) -> tuple[torch.fx.GraphModule, dict[str, torch.fx.Node]]:
    """A copy of the program's graph module, and old node name -> copied node.

    Copying may rename nodes (a placeholder called ``input`` becomes ``input_1``),
    so every name from the original program goes through the returned mapping.
    """
    copied: dict[torch.fx.Node, torch.fx.Node] = {}
    graph = torch.fx.Graph()
    output = graph.graph_copy(ep.graph, copied)
    output_node = graph.output(output)
    old_output = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    output_node.meta = copy.copy(old_output.meta)
    graph_module = torch.fx.GraphModule(ep.graph_module, graph)
    return graph_module, {old.name: new for old, new in copied.items()}


def _renamed(spec, nodes: dict[str, torch.fx.Node]):
    if not isinstance(spec.arg, TensorArgument) or spec.arg.name not in nodes:
        return spec
    return dataclasses.replace(spec, arg=TensorArgument(nodes[spec.arg.name].name))


@dataclass
class _ProgramUnderConstruction:
    """The parts of the new program :func:`apply_folds` builds from a copy of the old one's graph."""

    graph_module: torch.fx.GraphModule
    nodes: dict[str, torch.fx.Node]
    """Old node name -> copied node."""
    specs: dict[str, InputSpec]
    """Copied placeholder name -> its input spec."""
    state_dict: dict[str, Any]
    constants: dict[str, Any]
    taken_targets: set[str]

    @classmethod
    def copy_of(cls, ep: ExportedProgram) -> _ProgramUnderConstruction:
        graph_module, nodes = _copy_graph_module(ep)
        specs = {
            nodes[spec.arg.name].name: _renamed(spec, nodes)
            for spec in ep.graph_signature.input_specs
            if hasattr(spec.arg, "name")
        }
        state_dict, constants = dict(ep.state_dict), dict(ep.constants)
        taken_targets = set(state_dict) | set(constants) | {s.target for s in specs.values() if s.target}
        return cls(graph_module, nodes, specs, state_dict, constants, taken_targets)

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph

    def parameter_anchor(self) -> torch.fx.Node | None:
        """The node the new parameters go before: after the last parameter, as a program lists its parameters
        before its buffers, constants and user inputs."""
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        parameters = [n for n in placeholders if self.specs[n.name].kind == InputKind.PARAMETER]
        return parameters[-1].next if parameters else placeholders[0] if placeholders else None

    def write_folded(
        self, candidate: FoldCandidate, folded: dict[str, torch.Tensor], anchor: torch.fx.Node | None
    ) -> AppliedFold:
        """Each root of ``candidate`` replaced by a new parameter holding its folded tensor."""
        gemm = self.nodes[candidate.gemm]
        written = []
        for slot, root_name in candidate.roots:
            root = self.nodes[root_name]
            target = _unique(f"{module_path(gemm) or gemm.name}.{slot}", self.taken_targets)
            self.taken_targets.add(target)
            with self.graph.inserting_before(anchor):
                constant = self.graph.placeholder("p_" + target.replace(".", "_"))
            constant.meta["val"] = root.meta["val"]
            if "tensor_meta" in root.meta:
                constant.meta["tensor_meta"] = root.meta["tensor_meta"]
            root.replace_all_uses_with(constant)
            self.state_dict[target] = torch.nn.Parameter(folded[root_name], requires_grad=False)
            self.specs[constant.name] = InputSpec(InputKind.PARAMETER, TensorArgument(constant.name), target)
            written.append((constant.name, target))
        return AppliedFold(candidate, tuple(written))

    def erase_computation(self, candidate: FoldCandidate) -> None:
        """Drop ``candidate``'s computation, then the sources it alone read, with their data."""
        for name in reversed(candidate.computation):
            self.graph.erase_node(self.nodes[name])
        for name, target in zip(candidate.sources, candidate.source_targets):
            self.graph.erase_node(self.nodes[name])
            self.specs.pop(name, None)
            self.state_dict.pop(target, None)
            self.constants.pop(target, None)

    def exported_program(self, ep: ExportedProgram) -> ExportedProgram:
        """The finished program; what the folds did not change (ranges, call graph, outputs) is ``ep``'s."""
        self.graph.lint()
        self.graph_module.recompile()
        input_specs = [self.specs[n.name] for n in self.graph.nodes if n.op == "placeholder"]
        output_specs = [_renamed(spec, self.nodes) for spec in ep.graph_signature.output_specs]
        return ExportedProgram(
            root=self.graph_module,
            graph=self.graph,
            graph_signature=ExportGraphSignature(input_specs=input_specs, output_specs=output_specs),
            state_dict=self.state_dict,
            range_constraints=copy.copy(ep.range_constraints),
            module_call_graph=copy.deepcopy(ep.module_call_graph),
            example_inputs=ep.example_inputs,
            constants=self.constants,
            verifiers=[ep.verifier],
        )


def apply_folds(ep: ExportedProgram, candidates: Iterable[FoldCandidate]) -> tuple[ExportedProgram, list[AppliedFold]]:
    """A new program with each candidate's computation replaced by its folded constants."""
    candidates = list(candidates)
    if not candidates:
        return ep, []
    folded_values = {c.gemm: _evaluate(ep, c) for c in candidates}
    program = _ProgramUnderConstruction.copy_of(ep)
    anchor = program.parameter_anchor()
    # Every new parameter before any erasing: erasing may remove the anchor's neighbours.
    applied = [program.write_folded(c, folded_values[c.gemm], anchor) for c in candidates]
    for candidate in candidates:
        program.erase_computation(candidate)
    return program.exported_program(ep), applied
