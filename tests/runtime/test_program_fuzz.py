"""Damaged programs never kill the process: each one loads or raises a one-line `ProgramLoadError`.

A tiny Conv1d+Linear program with one XNNPACK delegate is truncated and has bytes flipped (seeded), at
random positions biased to the header, the flatbuffer, the delegate payload and the constants. The mutants
are loaded through the public loader, all in one subprocess (this file run as a script), so that a crash
would show as the subprocess dying by a signal instead of taking pytest down with it.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

MUTANTS = 300
SEED = 20261201
DELEGATE_MAGIC = b"XH00"
"""Bytes 4..8 of an XNNPACK delegate payload (its header)."""


def mutants(buffer: bytes, count: int, seed: int) -> list[tuple[str, bytes]]:
    """``count`` (description, bytes) mutants of ``buffer``: truncations and flips of 1 to 4 bytes."""
    from audiodeploy.runtime.pte_check import check_program_bytes

    layout = check_program_bytes(buffer, "the fuzzed program")
    base = layout.segment_base_offset
    segments = [(base + offset, base + offset + size) for offset, size in layout.segments if size]
    delegates = [(start, end) for start, end in segments if buffer[start + 4 : start + 8] == DELEGATE_MAGIC]
    constants = [span for span in segments if span not in delegates]
    assert delegates and constants, "the fuzzed program should hold an XNNPACK delegate and constants"
    regions = [
        ((0, 64), 3),  # the flatbuffer root, the file identifier, the extended header
        ((64, layout.program_bytes), 4),  # the program's flatbuffer
        (delegates[0], 4),  # the XNNPACK payload: its header and flatbuffer, which XNNPACK reads unverified
        (constants[0], 1),
        ((0, len(buffer)), 1),
    ]
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        if rng.random() < 0.15:
            flatbuffer_end = layout.program_bytes
            ends = [rng.randrange(0, 64), rng.randrange(64, flatbuffer_end), rng.randrange(flatbuffer_end, len(buffer))]
            end = rng.choice(ends)
            out.append((f"truncated to {end} bytes", buffer[:end]))
            continue
        (low, high), _ = rng.choices(regions, weights=[weight for _, weight in regions])[0]
        mutant = bytearray(buffer)
        positions = []
        for _ in range(rng.choice([1, 1, 1, 2, 4])):
            position = rng.randrange(low, high)
            kind = rng.randrange(4)
            if kind == 0:
                mutant[position] ^= 1 << rng.randrange(8)
            elif kind == 1:
                mutant[position] ^= rng.randrange(1, 256)
            else:
                mutant[position] = 0xFF if kind == 2 else 0x00
            positions.append(position)
        out.append((f"bytes {positions} changed", bytes(mutant)))
    return out


def load_all(path: Path, count: int, seed: int) -> dict:
    """Load every mutant through `Program`; what happened to each, counted."""
    from audiodeploy.runtime import Program, ProgramLoadError

    outcomes: dict[str, int] = {}
    problems = []
    for i, (what, buffer) in enumerate(mutants(path.read_bytes(), count, seed)):
        try:
            program = Program(buffer, origin=f"mutant {i}")
            for name in program.method_names:  # a flipped byte may rename the method
                program.input_specs(name)
            outcome = "loaded"
        except ProgramLoadError as error:
            message = str(error)
            if "\n" in message or not message.startswith(("mutant ", "the ExecuTorch runtime crashed")):
                problems.append(f"mutant {i} ({what}): {message!r}")
            if "crashed while loading" in message:
                outcome = "runtime crash, caught by the probe"
            elif "ExecuTorch's verification refused" in message or "does not load" in message:
                outcome = "refused by ExecuTorch"
            else:
                outcome = "refused by the checks in Python"
        except Exception as error:  # anything else is a bug of the loader
            outcome = "other exception"
            problems.append(f"mutant {i} ({what}): {type(error).__name__}: {error}")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {"outcomes": outcomes, "problems": problems}


def test_fp32_conv_linear_mutants_load_or_raise_a_load_error(tmp_path):
    import torch

    import audiodeploy

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv1d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 14, 3)
    )
    path = audiodeploy.lower(module.eval(), (torch.randn(1, 1, 16),)).save(tmp_path / "tiny.pte")
    report = tmp_path / "report.json"
    environment = {**os.environ, "AUDIODEPLOY_CACHE_DIR": str(tmp_path / "cache")}
    child = subprocess.run(
        [sys.executable, __file__, str(path), str(MUTANTS), str(SEED), str(report)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert child.returncode >= 0, f"the loading process died by signal {-child.returncode}: {child.stderr[-2000:]}"
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(report.read_text())
    print(result["outcomes"])
    assert not result["problems"], result["problems"][:10]
    assert sum(result["outcomes"].values()) == MUTANTS
    assert set(result["outcomes"]) <= {
        "loaded",
        "refused by the checks in Python",
        "refused by ExecuTorch",
        "runtime crash, caught by the probe",
    }
    assert result["outcomes"].get("loaded", 0) > 0 and result["outcomes"].get("refused by the checks in Python", 0) > 0
    assert child.stdout == "" and child.stderr == "", "loading should print nothing"


if __name__ == "__main__":
    target, count, seed, report_path = sys.argv[1:]
    Path(report_path).write_text(json.dumps(load_all(Path(target), int(count), int(seed))))
