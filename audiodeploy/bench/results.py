"""The one results schema of ``audiodeploy bench``, for every target and transport, and its terminal table.

A record (``schema: audiodeploy.bench/1``)::

    {
      "schema": "audiodeploy.bench/1",
      "benchmark": "bench",
      "name": "wav2vec2-base",                  # what models.md calls it
      "target": {"kind": "recipe" | "pte", "recipe", "variant", "source", "weights", "parameters",
                 "path", "sample_rate", "input_kind", "length_range_seconds"},
      "transport": {"kind": "local" | "adb", ...},   # adb: serial, runner, device {model, abi, android}
      "settings": {"runs", "warmup", "stock_runs", "stock_warmup", "threads", "seed", "compare"},
      "machine": {"date", "command", "platform", "processor", "cpu_count", "threads", versions...},
      "baseline": "audiodeploy",                # what ratios divide (None for a lone .pte)
      "runtimes": {NAME: {"name", "label", "engine", "delegates", "ops_outside_delegates",
                          "program_bytes", "prepare_s", "notes", "lowering_report"}},
      "cases": [{
          "seconds", "audio_seconds", "input_length", "input_shape",
          "runtimes": {NAME: {"load_s", "peak_rss_bytes", "rtf", "max_abs_diff_vs_eager",
                              "snr_db_vs_eager", "argmax_agreement_vs_eager", "notes",
                              "latency": {"runs", "warmup", "median_s", "p90_s", "min_s", "max_s",
                                          "mean_s", "samples_s"}}},
          "ratios": {"audiodeploy/NAME": float},   # baseline median / NAME median: < 1 means faster
          "paired_ratios": {"audiodeploy/NAME": float}
      }],
      "ratios_note": "...", "memory_note": "..."
    }

Figures that were not measured are ``null``, never guessed: the load time when the runner
does not print it, memory on the phone, the difference to eager without an eager run.

``snr_db_vs_eager`` (output SNR against eager PyTorch, dB; null also when the output is eager's bit for bit)
and ``argmax_agreement_vs_eager`` (CTC logits only: the fraction of frames with eager's most likely token)
were added later: records written before them lack the keys and are still valid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from audiodeploy._files import atomic_write_text
from audiodeploy.errors import AudiodeployError

SCHEMA = "audiodeploy.bench/1"

NATIVE_SUFFIX = "-native"
"""``--device native`` names the runner's measurement of runtime NAME ``NAME-native``."""

POS_CONV = "pos-conv"
"""The target (and ``target.kind``) of ``audiodeploy bench pos-conv`` (:mod:`audiodeploy.bench.pos_conv`)."""

RATIOS_NOTE = (
    "ratios: the baseline's median latency / the runtime's, measured in the same run (< 1: the baseline is "
    "faster); paired_ratios: median over the rounds of the per-round ratio (interleaved local runs only)"
)

MEMORY_NOTE = (
    "peak_rss_bytes: how far this process's resident memory rose while the runtime loaded, plus how far it rose "
    "during its first call at this length (sampled every millisecond); memory that the process had freed earlier "
    "and reuses is not counted, so in-process figures are lower bounds (eager PyTorch reuses the memory of the "
    "reference call made before it); null where not measured (on a phone)"
)

CASE_FIGURES = ("load_s", "peak_rss_bytes", "rtf", "max_abs_diff_vs_eager", "latency", "notes")
OPTIONAL_CASE_FIGURES = ("snr_db_vs_eager", "argmax_agreement_vs_eager")
"""Figures added after the first records: absent from older ones; a number or null where present."""
LATENCY_FIGURES = ("runs", "warmup", "median_s", "p90_s", "min_s", "max_s", "mean_s", "samples_s")


class SchemaError(AudiodeployError, ValueError):
    """A record that does not follow ``audiodeploy.bench/1``."""


def validate(record: dict[str, Any]) -> dict[str, Any]:
    """Check the structure every consumer (table, plot, models.md) relies on; returns the record."""
    if record.get("schema") != SCHEMA:
        raise SchemaError(f"schema is {record.get('schema')!r}, expected {SCHEMA!r}")
    for key in ("name", "target", "transport", "settings", "machine", "runtimes", "cases", "baseline"):
        if key not in record:
            raise SchemaError(f"missing {key!r}")
    if not record["cases"]:
        raise SchemaError("no cases")
    names = set(record["runtimes"])
    for case in record["cases"]:
        if set(case["runtimes"]) != names:
            raise SchemaError(
                f"case {case.get('seconds')} s measured {sorted(case['runtimes'])}, runtimes are {sorted(names)}"
            )
        for name, figures in case["runtimes"].items():
            missing = [k for k in CASE_FIGURES if k not in figures] + [
                f"latency.{k}" for k in LATENCY_FIGURES if k not in figures.get("latency", {})
            ]
            if missing:
                raise SchemaError(f"{name} at {case['seconds']} s lacks {', '.join(missing)}")
            for key in OPTIONAL_CASE_FIGURES:
                value = figures.get(key)
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    raise SchemaError(f"{name} at {case['seconds']} s: {key} should be a number or null, not {value!r}")
            agreement = figures.get("argmax_agreement_vs_eager")
            if agreement is not None and not 0.0 <= agreement <= 1.0:
                raise SchemaError(
                    f"{name} at {case['seconds']} s: argmax_agreement_vs_eager {agreement} is not in [0, 1]"
                )
        baseline = record["baseline"]
        expected = {f"{baseline}/{n}" for n in names if n != baseline} if baseline else set()
        if set(case["ratios"]) != expected:
            raise SchemaError(
                f"case {case['seconds']} s has ratios {sorted(case['ratios'])}, expected {sorted(expected)}"
            )
    return record


def write_json(path: Path, record: dict[str, Any]) -> Path:
    validate(record)
    return atomic_write_text(path, json.dumps(record, indent=2) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    return validate(json.loads(Path(path).read_text(encoding="utf-8")))


# --- formatting -----------------------------------------------------------------------------


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    value = seconds * 1e3
    if value >= 100:
        return f"{value:,.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms" if value >= 1 else f"{value * 1e3:.0f} µs"


def size(n: int | None) -> str:
    if n is None:
        return "–"
    if n >= 2**30:
        return f"{n / 2**30:.2f} GiB"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def ratio_words(ratio: float, baseline: str) -> str:
    """``0.0053`` -> ``0.0053 (audiodeploy 187x faster)``."""
    number = f"{ratio:.2g}" if ratio < 0.1 else f"{ratio:.3f}"
    if ratio <= 0:
        return number
    if ratio < 1:
        return f"{number} ({baseline} {1 / ratio:,.3g}x faster)"
    return f"{number} ({baseline} {ratio:,.3g}x slower)"


def where_measured(record: dict[str, Any]) -> str:
    """Where a record was measured, as the table's heading says it."""
    transport = record["transport"]
    kind = transport["kind"]
    device = transport.get("device") or {}
    if kind == "local":
        return "this machine"
    if kind == "native":
        # The pos-conv target runs the runner alone; every other target puts it beside the Python runtime.
        beside = any(name.endswith(NATIVE_SUFFIX) for name in record["runtimes"])
        return "this machine (Python runtime and native runner)" if beside else "this machine (native runner)"
    if kind == "qemu-aarch64":
        return "emulated arm64 (qemu-aarch64; latency says nothing about hardware)"
    return f"{device.get('model') or kind + ' device'} over {kind}"


def ops(outside: dict[str, int] | None) -> str:
    if outside is None:
        return "–"
    parts = [f"{op.removeprefix('aten.')}{f' x{n}' if n > 1 else ''}" for op, n in outside.items()]
    if len(parts) > 6:
        parts = parts[:6] + [f"+{len(parts) - 6} more"]
    return ", ".join(parts) or "none"


def aligned(rows: list[list[str]]) -> list[str]:
    """Rows as columns padded to their widest cell, a rule under the first."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _fidelity_columns(case: dict[str, Any]) -> list[tuple[str, tuple[str, Any]]]:
    """(title, (figure, format)) of the fidelity figures some runtime of ``case`` has (none: no columns)."""
    columns = [
        ("SNR", ("snr_db_vs_eager", lambda v: "–" if v is None else f"{v:.1f} dB")),
        ("argmax", ("argmax_agreement_vs_eager", lambda v: "–" if v is None else f"{100 * v:.1f}%")),
    ]
    return [
        column
        for column in columns
        if any(figures.get(column[1][0]) is not None for figures in case["runtimes"].values())
    ]


def heading(what: str, record: dict[str, Any]) -> str:
    """The table's first line: what was measured, where, with how many threads, on what, with which versions."""
    machine = record["machine"]
    return (
        f"{what}; on {where_measured(record)}; {machine['threads'] or 'default'} thread(s); "
        f"{machine.get('processor') or machine.get('machine')}; torch {machine['torch']}, executorch {machine['executorch']}"
    )


def format_table(record: dict[str, Any]) -> str:
    """The readable summary printed on the terminal."""
    target = record["target"]
    if target["kind"] == POS_CONV:
        from audiodeploy.bench.pos_conv import format_table as format_pos_conv  # it builds on this module

        return format_pos_conv(record)
    baseline = record["baseline"]
    what = (
        f"{target['recipe']} {target['variant']} ({target['source']}, {target['weights']})"
        if target["kind"] == "recipe"
        else target["path"]
    )
    lines = [heading(what, record)]
    for name, info in record["runtimes"].items():
        extra = (
            f"; {info['delegates']} delegate(s), outside: {ops(info['ops_outside_delegates'])}"
            if info["delegates"] is not None
            else ""
        )
        prepared = f"; prepared in {info['prepare_s']:.1f} s" if info["prepare_s"] is not None else ""
        lines.append(f"  {name}: {info['label']}, {size(info['program_bytes'])}{prepared}{extra}")
    for case in record["cases"]:
        audio = f": {case['audio_seconds']:.2f} s of audio" if case["audio_seconds"] else ""
        lines += ["", f"input {tuple(case['input_shape'])}{audio}"]
        header = [
            "runtime",
            "load",
            "median",
            "p90",
            "min",
            "runs",
            "RTF",
            "peak mem",
            "max diff",
            f"{baseline}/this" if baseline else "",
        ]
        fidelity = _fidelity_columns(case)
        header[9:9] = [title for title, _ in fidelity]
        rows = [header]
        for name, figures in case["runtimes"].items():
            latency = figures["latency"]
            key = f"{baseline}/{name}"
            rows.append(
                [
                    name,
                    ms(figures["load_s"]),
                    ms(latency["median_s"]),
                    ms(latency["p90_s"]),
                    ms(latency["min_s"]),
                    f"{latency['runs']}+{latency['warmup']}",
                    "–" if figures["rtf"] is None else f"{figures['rtf']:.3f}",
                    size(figures["peak_rss_bytes"]),
                    "–" if figures["max_abs_diff_vs_eager"] is None else f"{figures['max_abs_diff_vs_eager']:.1e}",
                    *(show(figures.get(key)) for _, (key, show) in fidelity),
                    ratio_words(case["ratios"][key], baseline) if key in case["ratios"] else "",
                ]
            )
        lines += aligned(rows)
        notes = [f"{name}: {note}" for name, figures in case["runtimes"].items() for note in figures["notes"]]
        lines += [f"  note: {n}" for n in notes]
    lines += ["", "RTF: median latency / audio duration (< 1 is faster than real time). runs: timed + warm-up."]
    return "\n".join(lines)
