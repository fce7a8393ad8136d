"""The lowering core: export -> fold computed GEMM weights -> (int8) -> XNNPACK -> .pte, with a report.

It runs no program: :func:`lower` measures a quantized program through the caller's :class:`ProgramRunner`
(``audiodeploy.lower`` gives one on :mod:`audiodeploy.runtime`).
"""

from audiodeploy.lowering.pipeline import (
    DataDependentShapeError,
    ExampleShapeError,
    FixedSizeError,
    LoweredProgram,
    LoweringOptions,
    Method,
    ProgramRunner,
    RecurrentLengthError,
    lower,
)
from audiodeploy.lowering.quantize import (
    KeepFp32PatternError,
    Quantization,
    QuantizationError,
    QuantizationScheme,
)
from audiodeploy.program.report import (
    DeclinedGemm,
    Fold,
    Fp32Gemm,
    GemmSensitivity,
    LoweringReport,
    MethodReport,
    NotFolded,
    PrecisionReport,
    QuantizationReport,
    QuantizedMethod,
)

__all__ = [
    "DataDependentShapeError",
    "DeclinedGemm",
    "ExampleShapeError",
    "FixedSizeError",
    "Fold",
    "Fp32Gemm",
    "GemmSensitivity",
    "KeepFp32PatternError",
    "LoweredProgram",
    "LoweringOptions",
    "LoweringReport",
    "Method",
    "MethodReport",
    "NotFolded",
    "ProgramRunner",
    "Quantization",
    "QuantizationError",
    "PrecisionReport",
    "QuantizationReport",
    "QuantizationScheme",
    "QuantizedMethod",
    "RecurrentLengthError",
    "lower",
]
