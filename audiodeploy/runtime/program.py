"""Load and run a .pte with ExecuTorch's Python runtime (XNNPACK included)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch
from executorch.extension.pybindings import portable_lib


class ProgramLoadError(ValueError):
    """The bytes are not an ExecuTorch program this runtime can load."""


class Program:
    """A loaded ExecuTorch program.

    Keeps the .pte bytes alive as long as the loaded module: the runtime reads
    from the caller's buffer, and a freed buffer crashes later.
    """

    def __init__(self, buffer: bytes, origin: str = "<bytes>", data: bytes | None = None) -> None:
        self._buffer = bytes(buffer)
        self._data = bytes(data) if data is not None else None
        self.origin = origin
        try:
            if self._data is None:
                self._module = portable_lib._load_for_executorch_from_buffer(self._buffer)
            else:
                self._module = portable_lib._load_for_executorch_from_buffer(
                    self._buffer, data_map_buffer=self._data
                )
            # Loading is lazy: asking for the methods parses and verifies the program now.
            self._method_names = sorted(self._module.method_names())
        except (RuntimeError, ValueError) as error:
            raise ProgramLoadError(f"{origin} is not a loadable ExecuTorch program ({error})") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str], data_path: str | os.PathLike[str] | None = None) -> "Program":
        """Load a .pte, and the .ptd holding its external constants if it has one."""
        path = Path(path)
        data = Path(data_path).read_bytes() if data_path is not None else None
        return cls(path.read_bytes(), origin=str(path), data=data)

    @property
    def method_names(self) -> list[str]:
        return list(self._method_names)

    def run(self, inputs: Sequence[torch.Tensor], method: str = "forward") -> list[torch.Tensor]:
        return list(self._module.run_method(method, tuple(inputs)))
