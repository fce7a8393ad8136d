"""The one results schema of ``audiodeploy bench``, for every target and transport, and its terminal table.

The record is `BenchRecord`, a tree of frozen dataclasses (:mod:`audiodeploy.program.records`) that writes and
reads itself; its JSON Schema is checked in as ``audiodeploy/program/schemas/bench-record.schema.json``. The bench
builds one, and hands it on as its dictionary (``to_dict()``), which the table, the chart, ``--json`` and
models.md read; `validate` and `read_json` check a dictionary by reading it through the record. In short
(``schema: audiodeploy.bench/1``)::

    {
      "schema": "audiodeploy.bench/1",
      "benchmark": "bench",
      "name": "wav2vec2-base",                  # what models.md calls it
      "target": {"kind": "recipe" | "pte" | "pos-conv", "recipe", "variant", "source", "weights", "parameters",
                 "path", "sample_rate", "input_kind", "length_range_seconds", "method" (several methods only)},
      "transport": {"kind": "local" | "native" | "qemu-aarch64" | "adb" | "ssh", ...},  # one record per transport
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from audiodeploy._files import atomic_write_text
from audiodeploy.bench.timing import latency_dict
from audiodeploy.errors import AudiodeployError
from audiodeploy.native.run import RunnerCpu
from audiodeploy.program.records import OMITTED_WHEN_NONE, Record
from audiodeploy.runtime.profile import Profile, format_profile

SCHEMA: Final = "audiodeploy.bench/1"

NATIVE_SUFFIX = "-native"
"""``--device native`` names the runner's measurement of runtime NAME ``NAME-native``."""

POS_CONV: Final = "pos-conv"
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


class SchemaError(AudiodeployError, ValueError):
    """A record that does not follow ``audiodeploy.bench/1``."""


# --- the record ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BenchTarget(Record):
    """What was measured: a recipe's model, a .pte (with what its sidecar says, else nulls), or the pos-conv
    module; every key is there for every kind, null where it has no meaning."""

    kind: Literal["recipe", "pte", "pos-conv"]
    recipe: str | None
    variant: str | None
    source: str | None
    weights: str | None
    parameters: int | None
    path: str | None
    """The .pte measured (kind ``pte``)."""
    sample_rate: int | None
    input_kind: Literal["waveform", "mel", "fbank", "codes", "latents", "frames"] | None
    """The measured method's input (a codec's decode: ``codes``; pos-conv: ``frames``)."""
    length_range_seconds: tuple[float, float] | None
    method: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """A recipe whose program has several methods: the one measured, lowered alone (``--method``)."""
    module: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """pos-conv only, like ``shape`` and ``gflop``: the module, its size, and the work of one call."""
    shape: dict[str, int] | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    gflop: float | None = field(default=None, metadata=OMITTED_WHEN_NONE)

    def __post_init__(self) -> None:
        if (self.kind == POS_CONV) != (self.module is not None):
            raise ValueError("field 'module' is for the pos-conv target, and only there")


@dataclass(frozen=True, kw_only=True)
class AndroidDevice(Record):
    """An Android phone as adb reports it (``getprop``), and the CPU the project's runner saw there."""

    model: str
    abi: str
    android: str
    cpu: RunnerCpu | None = None
    """The runner's (the project's bundle only, once it ran)."""


@dataclass(frozen=True, kw_only=True)
class SshDevice(Record):
    """A board over ssh (``uname -n``, ``uname -m``), and the CPU the runner saw there once it ran."""

    hostname: str
    machine: str
    cpu: RunnerCpu | None = None


@dataclass(frozen=True, kw_only=True)
class LocalTransportDescription(Record):
    """``--device local``: every runtime in the benchmarking process."""

    kind: Literal["local"]
    runtime: str


@dataclass(frozen=True, kw_only=True)
class RunnerTransportDescription(Record):
    """``--device native`` or ``qemu-aarch64``: the project's runner on this machine (beside the Python runtime
    for ``native``, except for the pos-conv target), the linux-aarch64 build under qemu-aarch64."""

    kind: Literal["native", "qemu-aarch64"]
    runtime: str
    target: str
    """The runner build (``host``, ``linux-aarch64``)."""
    runner: str
    """The folder of the runner build."""
    executorch: str
    emulated: bool
    emulated_cpu: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """The CPU qemu emulated (``QEMU_CPU``)."""
    device: RunnerCpu | None


@dataclass(frozen=True, kw_only=True)
class SshTransportDescription(Record):
    """``--device ssh:[USER@]HOST[:PORT]``: the project's runner on a board over ssh."""

    kind: Literal["ssh"]
    host: str
    user: str | None
    port: int | None
    runtime: str
    target: str
    runner: str
    executorch: str
    device: SshDevice | None


@dataclass(frozen=True, kw_only=True)
class AdbRunnerTransportDescription(Record):
    """``--device adb[:SERIAL]``: the project's android-arm64 bundle on a phone."""

    kind: Literal["adb"]
    serial: str | None
    """None: the only device attached."""
    runtime: str
    target: str
    runner: str
    executorch: str
    remote_dir: str
    device: AndroidDevice | None


@dataclass(frozen=True, kw_only=True)
class ExecutorRunnerTransportDescription(Record):
    """``--device adb[:SERIAL] --runner PATH``: ExecuTorch's own ``executor_runner`` on a phone."""

    kind: Literal["adb"]
    serial: str | None
    runner: str
    """The ``executor_runner`` given."""
    remote_dir: str
    device: AndroidDevice | None


TransportDescription = (
    LocalTransportDescription
    | RunnerTransportDescription
    | SshTransportDescription
    | AdbRunnerTransportDescription
    | ExecutorRunnerTransportDescription
)
"""The record's ``transport``: what ran the programs, and where (``Transport.describe()``)."""


@dataclass(frozen=True, kw_only=True)
class BenchSettings(Record):
    """The run's options: timed and warm-up runs (stock ExecuTorch gets its own, it is slow), threads, seed."""

    runs: int
    warmup: int
    stock_runs: int
    stock_warmup: int
    threads: int | None
    """None: the device's runner kept its own default."""
    seed: int
    compare: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class SourceTree(Record):
    """The git commit of the audiodeploy checkout measured, and whether it had uncommitted changes."""

    commit: str
    uncommitted_changes: bool


@dataclass(frozen=True, kw_only=True)
class Machine(Record):
    """What a result was measured on and with which command (`audiodeploy.bench.timing.machine_info`)."""

    date: str
    """When the run started, ISO 8601 in UTC."""
    command: str
    platform: str
    machine: str
    processor: str
    vector_extensions: tuple[str, ...] | None = None
    """The CPU flags that decide which kernels run; recorded since 2026-11-30."""
    cpu_count: int | None
    threads: int | None
    load_average: tuple[float, ...] | None
    omp_wait_policy: str | None
    python: str
    torch: str | None
    executorch: str | None
    onnxruntime: str | None
    audiodeploy: str | None
    source_tree: SourceTree | None


@dataclass(frozen=True, kw_only=True)
class RuntimeDescription(Record):
    """One runtime compared, independent of the input length (`audiodeploy.bench.runtimes.RuntimeInfo`)."""

    name: str
    label: str
    engine: Literal["executorch", "pytorch", "onnxruntime"]
    delegates: int | None
    ops_outside_delegates: dict[str, int] | None
    program_bytes: int | None
    """.pte or .onnx size (eager: its parameters)."""
    prepare_s: float | None
    """Lowering (ExecuTorch) or export (ONNX) time; None when nothing was prepared."""
    notes: tuple[str, ...]
    lowering_report: dict[str, Any] | None
    """`audiodeploy.lowering.LoweringReport.to_dict()`: the lowering core owns its shape."""


@dataclass(frozen=True, kw_only=True)
class Latency(Record):
    """The timed runs of one runtime on one input, in seconds (warm-up runs excluded)."""

    runs: int
    warmup: int
    median_s: float
    p90_s: float
    min_s: float
    max_s: float
    mean_s: float
    samples_s: tuple[float, ...]
    """In the order they ran; one mean for an ``executor_runner`` that printed only its total."""

    @classmethod
    def of(cls, seconds: Sequence[float], warmup: int) -> Latency:
        """The latency of the timed calls `seconds`, after `warmup` untimed ones."""
        return cls.from_dict(latency_dict(list(seconds), warmup))


@dataclass(frozen=True, kw_only=True)
class RuntimeFigures(Record):
    """One runtime measured on one input: load, latency, memory, and its difference from eager PyTorch."""

    load_s: float | None
    peak_rss_bytes: int | None
    rtf: float | None
    """Median latency / audio duration; None without a duration (pos-conv, a .pte without its sidecar)."""
    max_abs_diff_vs_eager: float | None
    snr_db_vs_eager: float | None = None
    """Output SNR against eager, dB; null also when the output is eager's bit for bit. Added later: older records
    lack it, like ``argmax_agreement_vs_eager``."""
    argmax_agreement_vs_eager: float | None = None
    """CTC logits only: the fraction of frames with eager's most likely token."""
    notes: tuple[str, ...]
    latency: Latency
    profile: Profile | None = field(default=None, metadata=OMITTED_WHEN_NONE)
    """Where the time went (``--profile``): per operator kind and layer, from profiled runs after the timed ones."""

    def __post_init__(self) -> None:
        agreement = self.argmax_agreement_vs_eager
        if agreement is not None and not 0.0 <= agreement <= 1.0:
            raise ValueError(f"argmax_agreement_vs_eager {agreement} is not in [0, 1]")


@dataclass(frozen=True, kw_only=True)
class BenchCase(Record):
    """Every runtime measured at one input length, and the ratios of their median latencies."""

    seconds: float | None
    """The duration asked for (``--seconds``); None for the pos-conv target and a .pte at its bound."""
    audio_seconds: float | None
    """The audio the input covers, once rounded to a valid length."""
    input_length: int
    input_shape: tuple[int, ...]
    runtimes: dict[str, RuntimeFigures]
    ratios: dict[str, float]
    """``BASELINE/NAME``: the baseline's median / NAME's (< 1: the baseline is faster)."""
    paired_ratios: dict[str, float]
    """The median over rounds of the per-round ratio (interleaved local runs only)."""


@dataclass(frozen=True, kw_only=True)
class BenchRecord(Record):
    """What ``audiodeploy bench`` measured (schema ``audiodeploy.bench/1``): the target, where and how it ran,
    each runtime, and per input length every runtime's figures; ``--json`` writes it, benchmarks/results holds
    them, and models.md is made from them."""

    schema: Literal["audiodeploy.bench/1"] = SCHEMA
    benchmark: Literal["bench"] = "bench"
    name: str
    """What models.md calls it."""
    target: BenchTarget
    transport: TransportDescription
    settings: BenchSettings
    machine: Machine
    baseline: str | None
    """The runtime the ratios divide (None for a lone runtime)."""
    runtimes: dict[str, RuntimeDescription]
    cases: tuple[BenchCase, ...]
    ratios_note: str = RATIOS_NOTE
    memory_note: str = MEMORY_NOTE

    def __post_init__(self) -> None:
        if not self.cases:
            raise ValueError("no cases")
        names = set(self.runtimes)
        expected = {f"{self.baseline}/{n}" for n in names if n != self.baseline} if self.baseline else set()
        for case in self.cases:
            if set(case.runtimes) != names:
                raise ValueError(
                    f"case {case.seconds} s measured {sorted(case.runtimes)}, runtimes are {sorted(names)}"
                )
            if set(case.ratios) != expected:
                raise ValueError(f"case {case.seconds} s has ratios {sorted(case.ratios)}, expected {sorted(expected)}")


def validate(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """Check a record by reading it through `BenchRecord`; returns it as given. A record that does not read is a
    `SchemaError` naming its first malformed field (``field 'cases[0].runtimes.eager.latency.p90_s' is
    missing``)."""
    schema = record.get("schema") if isinstance(record, Mapping) else None
    if schema != SCHEMA:
        raise SchemaError(f"schema is {schema!r}, expected {SCHEMA!r}")
    try:
        BenchRecord.from_dict(record)
    except ValueError as error:
        raise SchemaError(str(error)) from None
    return record


def write_json(path: Path, record: BenchRecord | Mapping[str, Any]) -> Path:
    """Write `record` (checked first, when given as a dictionary) as ``--json`` does."""
    if isinstance(record, BenchRecord):
        return atomic_write_text(path, record.to_json())
    validate(record)
    return atomic_write_text(path, json.dumps(record, indent=2) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    """A record file as a dictionary, checked by reading it through `BenchRecord`; SchemaError naming the file."""
    record = json.loads(Path(path).read_text(encoding="utf-8"))
    try:
        validate(record)
    except SchemaError as error:
        raise SchemaError(f"{path}: {error}") from None
    return record


def read_record(path: Path) -> BenchRecord:
    """A record file, read."""
    return BenchRecord.from_dict(read_json(path))


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
    lines = [heading(_target_name(target), record)]
    lines += [_runtime_line(name, info) for name, info in record["runtimes"].items()]
    for case in record["cases"]:
        lines += _case_lines(case, record["baseline"])
    lines += ["", "RTF: median latency / audio duration (< 1 is faster than real time). runs: timed + warm-up."]
    for case in record["cases"]:
        for name, figures in case["runtimes"].items():
            if figures.get("profile"):
                at = f" at {case['audio_seconds']:g} s" if case.get("audio_seconds") else ""
                lines += ["", format_profile(Profile.from_dict(figures["profile"]), f"{name}{at}")]
    return "\n".join(lines)


def _target_name(target: dict[str, Any]) -> str:
    """The recipe's model (variant, source, weights) or the .pte measured, as the heading names it."""
    if target["kind"] == "recipe":
        method = f", its {target['method']} method" if target.get("method") else ""
        return f"{target['recipe']} {target['variant']}{method} ({target['source']}, {target['weights']})"
    return target["path"]


def _runtime_line(name: str, info: dict[str, Any]) -> str:
    """One runtime compared: its label and size, how long it took to prepare, its delegates."""
    extra = (
        f"; {info['delegates']} delegate(s), outside: {ops(info['ops_outside_delegates'])}"
        if info["delegates"] is not None
        else ""
    )
    prepared = f"; prepared in {info['prepare_s']:.1f} s" if info["prepare_s"] is not None else ""
    return f"  {name}: {info['label']}, {size(info['program_bytes'])}{prepared}{extra}"


def _case_lines(case: dict[str, Any], baseline: str | None) -> list[str]:
    """One input length: a row per runtime (the fidelity columns only where some runtime has the figure), then
    the runtimes' notes."""
    audio = f": {case['audio_seconds']:.2f} s of audio" if case["audio_seconds"] else ""
    fidelity = _fidelity_columns(case)
    header = ["runtime", "load", "median", "p90", "min", "runs", "RTF", "peak mem", "max diff"]
    header += [title for title, _ in fidelity] + [f"{baseline}/this" if baseline else ""]
    rows = [header]
    rows += [
        _figures_row(name, figures, case["ratios"], baseline, fidelity) for name, figures in case["runtimes"].items()
    ]
    notes = [f"{name}: {note}" for name, figures in case["runtimes"].items() for note in figures["notes"]]
    return ["", f"input {tuple(case['input_shape'])}{audio}", *aligned(rows), *(f"  note: {n}" for n in notes)]


def _figures_row(
    name: str,
    figures: dict[str, Any],
    ratios: dict[str, float],
    baseline: str | None,
    fidelity: list[tuple[str, tuple[str, Any]]],
) -> list[str]:
    """A runtime's row of the case table: its latency, memory and difference from eager, its ratio to the baseline."""
    latency = figures["latency"]
    key = f"{baseline}/{name}"
    return [
        name,
        ms(figures["load_s"]),
        ms(latency["median_s"]),
        ms(latency["p90_s"]),
        ms(latency["min_s"]),
        f"{latency['runs']}+{latency['warmup']}",
        "–" if figures["rtf"] is None else f"{figures['rtf']:.3f}",
        size(figures["peak_rss_bytes"]),
        "–" if figures["max_abs_diff_vs_eager"] is None else f"{figures['max_abs_diff_vs_eager']:.1e}",
        *(show(figures.get(figure)) for _, (figure, show) in fidelity),
        ratio_words(ratios[key], baseline) if baseline is not None and key in ratios else "",
    ]
