"""Store a value computed from parameters alone, read by anything but a GEMM's weight or bias, as a constant.

Some models compute a tensor from their parameters on every call, for an
elementwise op rather than a GEMM: BigVGAN's Snake activations take
``exp(alpha)`` of log-scale parameters and ``1 / (exp(beta) + 1e-9)``, 109 times
in a published generator. In the program such a computation is nine ops per
activation on ``[1, C, 1]`` tensors, each a node the delegate runs on every
call; its ``reciprocal`` has no XNNPACK config in ExecuTorch 1.5.1 at all, so it
runs on the portable kernels and cuts the delegate. This pass computes the value
once, with PyTorch on the program's parameters (so exactly as eager computes
it), and stores it as a lifted constant::

    before                                                     after

    beta ── unsqueeze ── unsqueeze ── exp ── add(1e-9) ──       beta_value [1, C, 1] (constant)
        ── reciprocal ── mul(1.0) ──┐                                      │
                                x ──┴─ mul ──                          x ──┴─ mul ──

The sources the computation alone read are dropped from the program.

The pass leaves a computation as it is, and does nothing on a program without
one, when

- it computes a GEMM's weight or bias, or something that computation also reads
  (:mod:`fold_computed_gemm_weights` folds those, checks that the GEMM is
  delegated, and reports each fold);
- it reads a user input, a size, a buffer the method mutates or a parameter
  tagged for a ``.ptd`` file, or an op in it is impure (random, in place);
- its value is larger than the sources it reads (an ``expand``): the program
  would grow. Values computed from shared sources are weighed together, against
  the sources they read between them, also those that stay in the program:
  SEW-D base-plus projects its relative-position table (``[512, 768]``) to keys
  and queries in each of its 24 layers, 48 values of 1.5 MiB against the table
  and 48 projection weights of 2.25 MiB, so they are stored, 72 MiB more than
  stock's program (1.10x: the weights stay, for the content's GEMMs), and no call
  spends the 29 GFLOP that eager spends on them. (A source something else reads too stays in the
  program: DAC's codebook, normalized for the search and read by the lookup, is
  stored twice, as its search then runs in the delegate.) A view of another such
  value is not stored: it stays a view, of that value's constant (Mimi computes its
  codebook once, for its lookup, and views it as ``[1, K, D]`` for its search).
"""

from __future__ import annotations

import torch

from audiodeploy.lowering.passes._gemms import static_slots
from audiodeploy.lowering.passes._graph import (
    NodeRewritePass,
    Skip,
    add_constant,
    ancestors,
    evaluate,
    is_pure,
    viewed_chain,
)


class ParameterOnlyValuesAsConstantsPass(NodeRewritePass):
    def candidates(self) -> list[torch.fx.Node]:
        """The roots of the values computed from constants alone that something else reads, downstream first (a
        root another one reads is still computed when that one is evaluated); GEMM weights and biases, and all
        they are computed from, are left to the GEMM fold."""
        self._computed = self._computed_from()
        gemm_arguments = [
            arg
            for node in self.graph.nodes
            for index, arg in enumerate(node.args)
            if index in static_slots(node) and arg in self._computed
        ]
        reserved = ancestors(gemm_arguments, expand=self._computed.__contains__)
        read_outside = [
            node
            for node in self.graph.nodes
            if node in self._computed
            and node not in reserved
            and any(user not in self._computed for user in node.users)
        ]
        # A view of another such value stays a view, of that value's constant: stored as well, it would be stored
        # twice (Mimi's codebook is computed once, read by its lookup, and viewed as [1, K, D] for its search).
        read = set(read_outside)
        roots = [node for node in read_outside if read.isdisjoint(viewed_chain(node)[1:])]
        # Each root's computation, found once: a rewrite replaces only roots downstream of those after it.
        self._computations = {root: ancestors([root], expand=self._computed.__contains__) for root in roots}
        order = {node: index for index, node in enumerate(self.graph.nodes)}
        self._values = {root: self._value(root, order) for root in roots}
        self._too_large = self._groups_larger_than_what_they_read(roots)
        return roots[::-1]

    def rewrite(self, root: torch.fx.Node) -> torch.fx.Node | Skip:
        value = self._values[root]
        if not isinstance(value, torch.Tensor):
            return Skip("its value is not one tensor")
        if root in self._too_large:
            return Skip(self._too_large[root])
        for node in self._computations[root]:
            if node in self.constants:
                self.release_constant(node)
        return add_constant(self.exported_program, self.graph, f"{root.name}_value", value)

    def _value(self, root: torch.fx.Node, order: dict[torch.fx.Node, int]) -> object:
        computation = self._computations[root]
        known = {node: self.constants[node] for node in computation if node in self.constants}
        return evaluate(sorted(computation, key=order.__getitem__), known)[root]

    def _groups_larger_than_what_they_read(self, roots: list[torch.fx.Node]) -> dict[torch.fx.Node, str]:
        """Each root whose group (the roots computed from a constant in common, transitively) would store more
        bytes than the constants the group reads, with the reason."""
        roots = [root for root in roots if isinstance(self._values[root], torch.Tensor)]  # the others stay
        computations = {root: self._computations[root] for root in roots}
        group_of = {root: root for root in roots}  # union-find over roots sharing a constant

        def find(root: torch.fx.Node) -> torch.fx.Node:
            while group_of[root] is not root:
                root = group_of[root]
            return root

        first_reader: dict[torch.fx.Node, torch.fx.Node] = {}
        for root, computation in computations.items():
            for constant in (node for node in computation if node in self.constants):
                group_of[find(root)] = find(first_reader.setdefault(constant, root))
        groups: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for root in roots:
            groups.setdefault(find(root), []).append(root)
        too_large = {}
        for members in groups.values():
            computed = set().union(*(computations[root] for root in members))
            read = sum(_bytes(self.constants[node]) for node in computed if node in self.constants)
            stored = sum(_bytes(self._values[root]) for root in members)
            if stored > read:
                shared = f" and {len(members) - 1} other value(s) computed from the same constants" * (len(members) > 1)
                reason = f"its value{shared} would store {stored} bytes, more than the {read} bytes of constants read"
                too_large.update(dict.fromkeys(members, reason))
        return too_large

    def _computed_from(self) -> set[torch.fx.Node]:
        """The pure ops whose every input is a constant or another such op (the constants themselves excluded)."""
        computed: set[torch.fx.Node] = set()
        for node in self.graph.nodes:
            if node.op != "call_function" or not is_pure(node.target) or not node.all_input_nodes:
                continue
            if all(arg in self.constants or arg in computed for arg in node.all_input_nodes):
                computed.add(node)
        return computed


def _bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
