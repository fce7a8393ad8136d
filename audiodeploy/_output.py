"""What the command line lets through to the terminal: only what is about the user's input, unless ``-v``.

Libraries announce a lot that is not: torch's deprecation notices (`_pytree` ... `register_constant()`), the hub's
retries, transformers' advice. Quiet mode raises their loggers to ERROR and ignores Python warnings; verbose mode
shows everything, at DEBUG, including what the ExecuTorch runtime logs while it loads a program (captured by
`audiodeploy.runtime.program`).
"""

from __future__ import annotations

import logging
import os
import warnings

_QUIET_LOGGERS = (
    "torch",
    "executorch",
    "transformers",
    "huggingface_hub",
    "onnxscript",
    "onnx_ir",
    "urllib3",
    "filelock",
)

_verbose = False


def verbose() -> bool:
    return _verbose


def configure(verbose_: bool) -> None:
    """Set up logging and warnings for the command line, before torch or any model library is imported."""
    global _verbose
    _verbose = verbose_
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    if verbose_:
        root.setLevel(logging.DEBUG)
        logging.captureWarnings(True)
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
        return
    root.setLevel(logging.WARNING)
    warnings.simplefilter("ignore")
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    # torch configures its own loggers when it is imported, resetting their levels, and reads TORCH_LOGS for
    # them ("-torch": errors only); transformers reads its verbosity from the environment the same way.
    os.environ.setdefault("TORCH_LOGS", "-torch")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
