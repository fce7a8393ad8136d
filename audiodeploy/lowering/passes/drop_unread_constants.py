"""Drop the constants that nothing in the program reads: buffers and lifted tensors, bytes and all.

``torch.export`` lifts every parameter and buffer of the module into the program, read or not, and ExecuTorch
1.5.1's ``to_edge`` drops the unread parameters only: an unread buffer or lifted constant is serialized into the
.pte. Models carry many: a residual vector quantizer holds every codebook it was trained with and the running
means each was learnt by (EnCodec at 24 kHz: 32 codebooks, of which 6 kbps reads 8), and a rewrite that stores a
value computed from buffers as one constant leaves those buffers unread. EnCodec's decode at 6 kbps, synthetic
weights, stored 45.1 MiB, and 32.6 MiB without them, as ONNX Runtime's export of the same module (its running means
are equal zeros there, which serialization stores once; a trained checkpoint's differ, 16 MiB more)::

    before                                         after

    codebook_0 [1024, 128] ── embedding ── ...     codebook_0 [1024, 128] ── embedding ── ...
    codebook_8 [1024, 128]        (read by nothing)
    embed_avg_0 [1024, 128]       (read by nothing)

The pass runs after the other rewrites, which leave constants unread too (the fold, after it, drops the sources only
its computation read). It does nothing on a program whose constants are all read. A buffer the program writes (a
mutated buffer) is state, not a constant, and stays; so does a parameter tagged for a ``.ptd`` file, which is not
stored in the program. Unread parameters are left to ``to_edge``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from audiodeploy.lowering.passes._graph import NodeRewritePass, Rewrite


class DropUnreadConstantsPass(NodeRewritePass):
    """Each buffer or lifted constant placeholder with no user is replaced by nothing, and released."""

    def candidates(self) -> Iterable[torch.fx.Node]:
        parameters = self.exported_program.graph_signature.inputs_to_parameters
        # Unread parameters are to_edge's to drop: the report names this pass only where it saves bytes.
        return [node for node in self.constants if not node.users and node.name not in parameters]

    def rewrite(self, node: torch.fx.Node) -> Rewrite:
        self.release_constant(node)
        nothing: Mapping[torch.fx.Node, torch.fx.Node] = {}  # a region with nothing in it: the node is only dropped
        return nothing
