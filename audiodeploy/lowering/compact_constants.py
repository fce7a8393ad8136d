"""Give every weight and constant of an exported program its own storage, from offset 0.

ExecuTorch 1.5.1's XNNPACK delegate serializes a constant tensor from the start of its storage, whatever its
``storage_offset``. A module whose buffer or parameter is a view into a larger tensor, say a selection matrix
``torch.eye(11)[1:]`` (a row slice of a contiguous tensor is contiguous, so ``.contiguous()`` keeps the view), is
lowered silently wrong: the delegate multiplies by ``torch.eye(11)[:-1]``, the storage's first ten rows. The
portable kernels read it right. Measured on a ``linear`` by such a buffer: every output off by up to 1.0 in stock
lowering, exact after this.

:func:`compact_constants` replaces each such tensor of the exported program (parameters, buffers and lifted
constants) by a copy with storage of its own, once, right after export. It does nothing when every tensor already
starts its own storage (the usual case: ``nn.Module`` parameters are allocated whole). It copies no more than those
views, and changes no value.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

__all__ = ["compact_constants"]


def _is_view_into_more(tensor: torch.Tensor) -> bool:
    storage_bytes = tensor.untyped_storage().nbytes()
    return tensor.storage_offset() != 0 or storage_bytes != tensor.numel() * tensor.element_size()


def compact_constants(exported: ExportedProgram) -> list[str]:
    """Copy each weight or constant of `exported` that is a view into a larger storage; the names copied."""
    copied = []
    for name, value in list(exported.state_dict.items()):
        if _is_view_into_more(value):
            compact = value.detach().clone()
            exported.state_dict[name] = (
                torch.nn.Parameter(compact, value.requires_grad) if isinstance(value, torch.nn.Parameter) else compact
            )
            copied.append(name)
    for name, constant in list(exported.constants.items()):
        if isinstance(constant, torch.Tensor) and _is_view_into_more(constant):
            exported.constants[name] = constant.detach().clone()
            copied.append(name)
    return copied
