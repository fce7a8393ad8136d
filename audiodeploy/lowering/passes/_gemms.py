"""The GEMMs XNNPACK delegates, which of their arguments it needs static, and how a report names one.

Shared by the fold (what it folds), the passes that must leave a GEMM's static arguments alone, the report
(which GEMMs stayed outside) and quantization (which GEMMs it quantized).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# GEMM op packet -> {argument index: slot name} of the arguments XNNPACK needs static.
GEMM_STATIC_SLOTS: dict[torch._ops.OpOverloadPacket, dict[int, str]] = {
    aten.conv1d: {1: "weight", 2: "bias"},
    aten.conv2d: {1: "weight", 2: "bias"},
    aten.conv3d: {1: "weight", 2: "bias"},
    aten.convolution: {1: "weight", 2: "bias"},
    aten._convolution: {1: "weight", 2: "bias"},
    aten.conv_transpose1d: {1: "weight", 2: "bias"},
    aten.conv_transpose2d: {1: "weight", 2: "bias"},
    aten.conv_transpose3d: {1: "weight", 2: "bias"},
    aten.linear: {1: "weight", 2: "bias"},
    aten.addmm: {2: "weight", 0: "bias"},
    aten.mm: {1: "weight"},
    aten.matmul: {1: "weight"},
}


def gemm_label(node: torch.fx.Node) -> str:
    """``linear @ encoder.layers.0.fc``: the op and the module that called it."""
    parts = getattr(node.target, "__name__", str(node.target)).split(".")
    op = parts[-2] if len(parts) >= 2 else parts[0]  # aten.convolution.default -> convolution
    return f"{op} @ {module_path(node) or '(top-level module)'}"


def module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _ = list(stack.values())[-1]
    return path


def static_slots(node: torch.fx.Node) -> dict[int, str]:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return {}
    return GEMM_STATIC_SLOTS.get(node.target.overloadpacket, {})
