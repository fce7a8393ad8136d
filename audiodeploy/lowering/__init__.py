"""The lowering core: export -> fold computed GEMM weights -> (int8) -> XNNPACK -> .pte, with a report."""

from audiodeploy.lowering.pipeline import LoweredProgram, Method, lower
from audiodeploy.lowering.quantize import SCHEMES, QuantizationError
from audiodeploy.lowering.report import (
    DeclinedGemm,
    Fold,
    Fp32Gemm,
    GemmSensitivity,
    LoweringReport,
    MethodReport,
    NotFolded,
    QuantizationReport,
    QuantizedMethod,
)

__all__ = [
    "DeclinedGemm",
    "Fold",
    "Fp32Gemm",
    "GemmSensitivity",
    "LoweredProgram",
    "LoweringReport",
    "Method",
    "MethodReport",
    "NotFolded",
    "QuantizationError",
    "QuantizationReport",
    "QuantizedMethod",
    "SCHEMES",
    "lower",
]
