"""Loading and running .pte programs."""

from audiodeploy.runtime.program import Program, ProgramLoadError

__all__ = ["Program", "ProgramLoadError"]
