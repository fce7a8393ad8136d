"""audiodeploy: speech and audio models from PyTorch to phones, through ExecuTorch and XNNPACK.

    import audiodeploy
    lowered = audiodeploy.lower(module, example_inputs)      # the lowering core
    int8 = audiodeploy.Quantization(audiodeploy.QuantizationScheme.INT8_DYNAMIC)
    lowered = audiodeploy.lower(module, example_inputs, options=audiodeploy.LoweringOptions(quantization=int8))
    from audiodeploy import recipes                          # model families, built for export
    model = audiodeploy.runtime.load("wav2vec2.pte")         # run a program; no model code needed

The lowering core imports torch and executorch; they are imported when first used, so that the command line
answers `--help` at once and running a program does not pay for what it does not use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LOWERING = ("LoweredProgram", "LoweringOptions", "LoweringReport", "Method", "Quantization", "QuantizationScheme")

__all__ = [*_LOWERING, "lower", "__version__"]

if TYPE_CHECKING:
    from audiodeploy._api import lower
    from audiodeploy.lowering import (
        LoweredProgram,
        LoweringOptions,
        LoweringReport,
        Method,
        Quantization,
        QuantizationScheme,
    )


def __getattr__(name: str) -> Any:
    if name == "lower":  # the core, with the runtime running the quantized programs it measures
        return importlib.import_module("audiodeploy._api").lower
    if name in _LOWERING:
        return getattr(importlib.import_module("audiodeploy.lowering"), name)
    if name in ("runtime", "recipes", "program", "bench", "lowering"):
        return importlib.import_module(f"audiodeploy.{name}")
    raise AttributeError(f"module 'audiodeploy' has no attribute {name!r}")
