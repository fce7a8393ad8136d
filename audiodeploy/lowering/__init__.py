"""The lowering core: export -> fold computed GEMM weights -> XNNPACK -> .pte, with a report."""

from audiodeploy.lowering.pipeline import LoweredProgram, Method, lower
from audiodeploy.lowering.report import (
    DeclinedGemm,
    Fold,
    LoweringReport,
    MethodReport,
    NotFolded,
)

__all__ = [
    "DeclinedGemm",
    "Fold",
    "LoweredProgram",
    "LoweringReport",
    "Method",
    "MethodReport",
    "NotFolded",
    "lower",
]
