"""audiodeploy: speech and audio models from PyTorch to phones, through ExecuTorch and XNNPACK."""

from audiodeploy.lowering import LoweredProgram, LoweringReport, Method, lower

__version__ = "0.1.0"

__all__ = ["LoweredProgram", "LoweringReport", "Method", "lower", "__version__"]
