"""Resident memory of this process, sampled in the background to catch the peak of a call.

``ru_maxrss`` only ever grows, so it cannot say what one runtime added once another
has been loaded; a sampler reading ``/proc/self/statm`` every millisecond can.
Where ``/proc`` does not exist (macOS), :func:`resident_bytes` is ``None`` and so is
every figure built on it.
"""

from __future__ import annotations

import os
import threading

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class PeakResident:
    """``with PeakResident() as peak: ...``; then ``peak.before``, ``peak.after`` and ``peak.peak`` in bytes.

    ``extra`` is how far the peak rose above the level before the block.
    """

    def __init__(self, interval_s: float = 0.001) -> None:
        self.interval_s = interval_s
        self.before: int | None = None
        self.after: int | None = None
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            now = resident_bytes()
            if now is not None and (self.peak is None or now > self.peak):
                self.peak = now

    def __enter__(self) -> PeakResident:
        self.before = resident_bytes()
        self.peak = self.before
        if self.before is not None:
            self._thread = threading.Thread(target=self._sample, name="peak-resident", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.after = resident_bytes()
        if self.after is not None and self.peak is not None:
            self.peak = max(self.peak, self.after)

    @property
    def extra(self) -> int | None:
        if self.before is None or self.peak is None:
            return None
        return max(0, self.peak - self.before)

    @property
    def retained(self) -> int | None:
        """What the block left resident (e.g. a loaded program)."""
        if self.before is None or self.after is None:
            return None
        return max(0, self.after - self.before)
