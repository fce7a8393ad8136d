"""Regenerate models.md from benchmarks/results/*.json. Never edit models.md by hand.

Usage: python benchmarks/generate_models_md.py
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))

from audiodeploy._files import atomic_write_text  # noqa: E402


def _ops(ops: dict[str, int] | None) -> str:
    if ops is None:
        return "–"
    return (
        ", ".join(f"{op.removeprefix('aten.')} ×{n}" if n > 1 else op.removeprefix("aten.") for op, n in ops.items())
        or "none"
    )


def _ms(latency: dict) -> str:
    return f"{latency['median_s'] * 1000:,.1f} ms"


def pos_conv_section(result: dict) -> list[str]:
    machine = result["machine"]
    lines = [
        f"## Positional convolution: `{result['module']}`",
        "",
        f"Input {tuple(result['config']['input_shape'])}, {result['config']['gflop']:.2f} GFLOP, fp32. "
        f"Measured {machine['date']} on {machine['processor'] or machine['machine']}, {machine['cpu_count']} CPUs, "
        f"{machine['threads']} thread(s); torch {machine['torch']}, executorch {machine['executorch']}. "
        f"Command: `{machine['command']}`.",
        "",
        "| lowering | delegates | ops outside delegates | median latency | max abs diff vs eager | .pte size |",
        "|---|---|---|---|---|---|",
    ]
    for runtime in result["results"].values():
        pte = runtime.get("pte_bytes")
        diff = f"{runtime['max_abs_diff']:.1e}" if "max_abs_diff" in runtime else "–"
        lines.append(
            f"| {runtime['label']} | {runtime.get('delegates', '–')} | {_ops(runtime.get('ops_outside_delegates'))} "
            f"| {_ms(runtime['latency'])} | {diff} | {pte / 2**20:.1f} MiB |"
            if pte is not None
            else f"| {runtime['label']} | – | – | {_ms(runtime['latency'])} | {diff} | – |"
        )
    lines += [
        "",
        "Ratios of median latencies, same run: " + ", ".join(f"{k} {v:.3g}" for k, v in result["ratios"].items()),
        "",
    ]
    return lines


def _latency_ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    value = seconds * 1000
    return f"{value:,.0f} ms" if value >= 100 else f"{value:,.1f} ms"


def _size(n: int | None) -> str:
    if n is None:
        return "–"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def _what(result: dict) -> str:
    target = result["target"]
    if target["kind"] == "recipe":
        method = f" {target['method']}" if target.get("method") else ""
        return f"{target['recipe']} {target['variant']}{method}"
    return f"`{Path(target['path']).name}`"


def _input(case: dict, target: dict) -> str:
    audio = f"{case['audio_seconds']:.3g} s" if case["audio_seconds"] else f"shape {tuple(case['input_shape'])}"
    if target.get("input_kind") == "mel":
        audio = f"{audio} of audio ({case['input_length']} mel frames)"
    elif target.get("input_kind") == "codes":
        audio = f"{audio} of audio ({case['input_length']} frames of codes)"
    shortest, longest = target.get("length_range_seconds") or (None, None)
    # Exported for that length alone, as a phone's runner takes it (the runtime cuts longer input into windows).
    return f"{audio}, one-length program" if shortest is not None and shortest == longest else audio


def _parameters(n: int) -> str:
    return f"{n / 1e6:.1f} M parameters. " if n >= 1e6 else f"{n / 1e3:.0f} k parameters. "


def _cases(results: list[dict]):
    """Every (result, case, the case's figures by runtime name), in order: one table row each."""
    for result in results:
        for case in result["cases"]:
            yield result, case, case["runtimes"]


def _fp32_comparisons(results: list[dict]):
    """`_cases`, but a case of an int8 comparison only where no other record measured that model at that input:
    the int8 runs' fp32 figures are in the int8 table, and they come from a run shared with the slow lowering of
    two more programs, on a machine busier than the fp32 comparison's."""

    def key(result: dict, case: dict) -> tuple[str, str]:
        return _what(result), _input(case, result["target"])

    fp32 = {key(result, case) for result, case, _ in _cases(results) if not _is_int8(result)}
    for result, case, figures in _cases(results):
        if not _is_int8(result) or key(result, case) not in fp32:
            yield result, case, figures


def _row_start(result: dict, case: dict) -> str:
    return f"| {_what(result)} | {_input(case, result['target'])} | {result['machine']['date'][:10]} "


def _median(figures: dict, name: str, detail: str = "") -> str:
    """``name``'s median latency in a case, with ``detail`` after it; a dash when it was not measured."""
    if name not in figures:
        return "–"
    return _latency_ms(figures[name]["latency"]["median_s"]) + detail


def _median_and_size(figures: dict, runtimes: dict, name: str) -> str:
    """``name``'s median latency in a case and its program's size; a dash when it was not measured."""
    size = runtimes.get(name, {}).get("program_bytes")
    return _median(figures, name, f", {_size(size)}" if size else "")


def bench_summary(results: list[dict]) -> list[str]:
    """One row per model and input length: the median latency of every runtime, side by side."""
    lines = [
        "## Latency side by side (`audiodeploy bench --compare`)",
        "",
        "Median latency of each runtime, measured interleaved in one process on the machine named in each "
        "section below; ratio = audiodeploy's median / the other's (< 1: audiodeploy is faster). "
        "Synthetic weights unless the section says otherwise: the speed is real, the outputs are not. "
        "The machine was shared with other jobs while these ran (the load average at the start of each run is in "
        "its section); idle threads did not spin (`OMP_WAIT_POLICY=PASSIVE` for PyTorch, no spinning for ONNX "
        "Runtime). "
        "Load is the time to load the program and its method (XNNPACK packs its weights then) or to create the "
        "ONNX Runtime session; peak memory is how far the process's resident memory rose while loading and "
        "during the first call, a lower bound (memory freed earlier and reused is not counted). "
        "Rows measured on different days may come from different machines of the same name: compare ratios "
        "within a row, not latencies across rows of different dates. A model measured both here and beside int8 "
        "is listed here from its fp32 comparison; the int8 table below has the fp32 figures of its int8 run.",
        "",
        "| model | input | measured | audiodeploy (delegates) | stock ExecuTorch (delegates) | eager PyTorch "
        "| ONNX Runtime | audiodeploy / stock | audiodeploy / eager | audiodeploy / ONNX Runtime |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result, case, figures in _fp32_comparisons(results):
        runtimes = result["runtimes"]

        def cell(name: str) -> str:
            delegates = runtimes.get(name, {}).get("delegates")
            return _median(figures, name, f" ({delegates})" if delegates is not None else "")

        def ratio(name: str) -> str:
            value = case["ratios"].get(f"{result['baseline']}/{name}")
            return "–" if value is None else f"{value:.3g}"

        main = "audiodeploy" if "audiodeploy" in figures else next(iter(figures))
        lines.append(
            f"{_row_start(result, case)}| {cell(main)} | {cell('stock')} | {cell('eager')} "
            f"| {cell('onnxruntime')} | {ratio('stock')} | {ratio('eager')} | {ratio('onnxruntime')} |"
        )
    return lines + [""]


_DEVICES = {
    "native": "this machine: the Python runtime and the native runner, one after the other",
    "qemu-aarch64": "emulated arm64 (qemu-aarch64): the outputs are checked, the latency means nothing",
}


def device_summary(results: list[dict]) -> list[str]:
    """Runs on a device or through the native runner: where, each runtime's median and its difference from eager."""
    lines = [
        "## On devices and in the native runner (`audiodeploy bench --device`)",
        "",
        "Each runtime's output is compared with eager PyTorch on this machine, so a wrong result on arm64 is caught.",
        "",
        "| model | input | measured | where | runtime | median | max diff vs eager |",
        "|---|---|---|---|---|---|---|",
    ]
    for result, case, figures in _cases(results):
        where = _DEVICES.get(result["transport"]["kind"], result["transport"]["kind"])
        for name in figures:
            diff = figures[name].get("max_abs_diff_vs_eager")
            lines.append(
                f"{_row_start(result, case)}| {where} | {name} | {_median(figures, name)} "
                f"| {'–' if diff is None else f'{diff:.1e}'} |"
            )
    return lines + [""]


_INT8 = ("audiodeploy-int8", "onnxruntime-int8")


def _is_int8(result: dict) -> bool:
    """Whether a bench record compared an int8 runtime."""
    return bool(set(_INT8) & set(result["runtimes"]))


def int8_summary(results: list[dict]) -> list[str]:
    """One row per model and length measured with an int8 runtime: latency, size and fidelity beside fp32."""
    lines = [
        "## int8 beside fp32 (`audiodeploy bench --compare audiodeploy-int8,onnxruntime,onnxruntime-int8,eager`)",
        "",
        "Median latency, program size, and fidelity against eager fp32 PyTorch on the benchmark's input: output "
        "SNR and, for CTC, the share of frames whose most likely token is eager's. audiodeploy-int8 is "
        "the recipe's first scheme with its default fp32 layers: int8-dynamic for the speech encoders, int8-static "
        "calibrated on generated signals for the vocoders; onnxruntime-int8 is ONNX Runtime's `quantize_dynamic` "
        "(QInt8) of the same ONNX export. Measured in one interleaved run; ratio = audiodeploy-int8's median / "
        "the other's.",
        "",
        "| model | input | measured | audiodeploy fp32 | audiodeploy-int8 | ONNX Runtime fp32 | onnxruntime-int8 "
        "| int8 / fp32 | int8 / ORT int8 | SNR (ours / ORT int8) | argmax (ours / ORT int8) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result, case, figures in _cases(results):
        runtimes = result["runtimes"]
        cell = functools.partial(_median_and_size, figures, runtimes)

        def ratio(name: str) -> str:
            if not {"audiodeploy-int8", name} <= set(figures):
                return "–"
            return f"{figures['audiodeploy-int8']['latency']['median_s'] / figures[name]['latency']['median_s']:.3g}"

        def fidelity(key: str, scale: float, unit: str) -> str:
            values = [figures.get(n, {}).get(key) for n in _INT8]
            return " / ".join("–" if v is None else f"{v * scale:.3g}{unit}" for v in values)

        lines.append(
            f"{_row_start(result, case)}| {cell('audiodeploy')} | {cell('audiodeploy-int8')} | {cell('onnxruntime')} "
            f"| {cell('onnxruntime-int8')} | {ratio('audiodeploy')} | {ratio('onnxruntime-int8')} "
            f"| {fidelity('snr_db_vs_eager', 1, ' dB')} | {fidelity('argmax_agreement_vs_eager', 100, '%')} |"
        )
    return lines + [""]


def _is_fp16(result: dict) -> bool:
    """Whether a bench record compared audiodeploy's fp16 program."""
    return "audiodeploy-fp16" in result["runtimes"]


def fp16_summary(results: list[dict]) -> list[str]:
    """One row per model and length measured with the fp16 program: latency, size and fidelity beside fp32."""
    lines = [
        "## fp16 beside fp32 (`audiodeploy bench --compare audiodeploy-fp16,onnxruntime`)",
        "",
        "Median latency and program size of audiodeploy's fp32 and fp16 programs of the same module (fp16: folded "
        "in fp32, stored and computed in fp16), and the fp16 program's output SNR against eager fp32 PyTorch. "
        "XNNPACK computes fp16 natively on arm64 with ARMv8.2 FP16 and on x86 with AVX512-FP16 only; the CPU "
        "column says what the machine had. ExecuTorch 1.5.1 stores convolution weights in fp32 in either program.",
        "",
        "| model | input | measured | CPU (fp16 arithmetic) | audiodeploy fp32 | audiodeploy-fp16 | ONNX Runtime fp32 "
        "| fp16 / fp32 time | fp16 / fp32 size | fp16 SNR |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result, case, figures in _cases(results):
        runtimes = result["runtimes"]
        cell = functools.partial(_median_and_size, figures, runtimes)
        machine = result["machine"]
        extensions = machine.get("vector_extensions") or ()
        native = "avx512_fp16" in extensions or "asimdhp" in extensions

        time_ratio = figures["audiodeploy-fp16"]["latency"]["median_s"] / figures["audiodeploy"]["latency"]["median_s"]
        size_ratio = runtimes["audiodeploy-fp16"]["program_bytes"] / runtimes["audiodeploy"]["program_bytes"]
        snr = figures["audiodeploy-fp16"].get("snr_db_vs_eager")
        lines.append(
            f"{_row_start(result, case)}| {machine.get('processor', '?')} ({'yes' if native else 'no'}) "
            f"| {cell('audiodeploy')} | {cell('audiodeploy-fp16')} | {cell('onnxruntime')} "
            f"| {time_ratio:.3g} | {size_ratio:.3g} | {'–' if snr is None else f'{snr:.3g} dB'} |"
        )
    return lines + [""]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def int8_fidelity_summary(results: list[dict]) -> list[str]:
    """One row per model and length of `benchmarks/int8_fidelity.py`: both int8 runtimes on the same inputs."""
    lines = [
        "## int8 fidelity on more inputs (`python benchmarks/int8_fidelity.py`)",
        "",
        "The int8 table above measures fidelity on the one input the benchmark times. Here both int8 runtimes run "
        "on the same several generated inputs per length, the timed one first: frame argmax agreement with eager "
        "fp32 PyTorch and output SNR, their mean and, per input, ours / ONNX Runtime int8's. Nothing is timed.",
        "",
        "| model | input | measured | keep fp32 | argmax ours / ORT int8 (mean) | SNR ours / ORT int8 (mean) "
        "| argmax per input, ours / ORT int8 |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for case in result["cases"]:
            ours, theirs = (case["runtimes"][name] for name in _INT8)
            per_input = ", ".join(
                f"{a * 100:.1f} / {b * 100:.1f}" for a, b in zip(ours["argmax_agreement"], theirs["argmax_agreement"])
            )
            lines.append(
                f"| {result['target']['recipe']} {result['target']['variant']} | {case['seconds']:g} s ({case['frames']} frames) "
                f"| {result['machine']['date'][:10]} | {', '.join(f'`{p}`' for p in result['keep_fp32'])} "
                f"| {_mean(ours['argmax_agreement']) * 100:.1f}% / {_mean(theirs['argmax_agreement']) * 100:.1f}% "
                f"| {_mean(ours['snr_db']):.1f} / {_mean(theirs['snr_db']):.1f} dB | {per_input} |"
            )
    return lines + [""]


def _where(machine: dict, transport: dict) -> str:
    extensions = machine.get("vector_extensions")  # recorded since 2026-11-30
    here = f"{machine['processor'] or machine['machine']}, {machine['cpu_count']} CPUs" + (
        f" ({', '.join(extensions)})" if extensions else ""
    )
    kind = transport["kind"]
    if kind == "local":
        return here
    if kind in _DEVICES:
        return f"{here}, {_DEVICES[kind]} ({transport.get('runner')})"
    return f"{transport['device'].get('model') or 'Android phone'} over {kind} ({transport.get('runner')})"


def bench_section(result: dict) -> list[str]:
    machine, target, transport = result["machine"], result["target"], result["transport"]
    where = _where(machine, transport)
    load = machine.get("load_average")
    tree = machine.get("source_tree") or {}
    lines = [
        f"### {_what(result)} ({result['name']})",
        "",
        f"Weights: {target['weights'] or 'unknown'}. "
        + (_parameters(target["parameters"]) if target.get("parameters") else "")
        + f"Measured {machine['date']} on {where}, {machine['threads'] or 'default'} thread(s)"
        + (f", load average {load[0]:.2f} at the start" if load else "")
        + (f", OMP_WAIT_POLICY={machine['omp_wait_policy']}" if machine.get("omp_wait_policy") else "")
        + f"; torch {machine['torch']}, executorch {machine['executorch']}, onnxruntime {machine.get('onnxruntime') or '–'}"
        + (
            f"; audiodeploy at {tree['commit'][:10]}{' with uncommitted changes' if tree.get('uncommitted_changes') else ''}"
            if tree
            else ""
        )
        + f". Command: `{machine['command']}`.",
        "",
    ]
    chart = RESULTS / f"{result['name']}.png"
    if chart.is_file():
        lines += [f"![{result['name']}: latency per runtime]({chart.relative_to(ROOT).as_posix()})", ""]
    lines += [
        "| runtime | delegates | ops outside delegates | program size | prepared in |",
        "|---|---|---|---|---|",
    ]
    for info in result["runtimes"].values():
        prepared = f"{info['prepare_s']:.0f} s" if info.get("prepare_s") is not None else "–"
        lines.append(
            f"| {info['label']} | {info['delegates'] if info['delegates'] is not None else '–'} "
            f"| {_ops(info['ops_outside_delegates'])} | {_size(info['program_bytes'])} | {prepared} |"
        )
    lines.append("")
    for case in result["cases"]:
        lines += [
            f"Input {tuple(case['input_shape'])}, {_input(case, target)}:",
            "",
            "| runtime | load | median | p90 | min | runs | real-time factor | peak memory | max abs diff vs eager |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, figures in case["runtimes"].items():
            latency = figures["latency"]
            rtf = "–" if figures["rtf"] is None else f"{figures['rtf']:.3f}"
            diff = "–" if figures["max_abs_diff_vs_eager"] is None else f"{figures['max_abs_diff_vs_eager']:.1e}"
            lines.append(
                f"| {name} | {_latency_ms(figures['load_s'])} | {_latency_ms(latency['median_s'])} "
                f"| {_latency_ms(latency['p90_s'])} | {_latency_ms(latency['min_s'])} | {latency['runs']} (+{latency['warmup']}) "
                f"| {rtf} | {_size(figures['peak_rss_bytes'])} | {diff} |"
            )
        lines.append("")
    return lines


def gemm_kernels_section(result: dict) -> list[str]:
    """`benchmarks/gemm_kernels.py`: one linear layer's rate in each runtime, by threads and shape."""
    machine = result["machine"]
    lines = [
        "## One fp32 linear layer: XNNPACK's kernel against ONNX Runtime's and PyTorch's "
        "(`python benchmarks/gemm_kernels.py`)",
        "",
        f"Measured {machine['date']} on {machine['processor'] or machine['machine']} "
        f"({', '.join(machine.get('vector_extensions') or ())}), {machine['cpu_count']} CPUs; "
        f"torch {machine['torch']}, executorch {machine['executorch']}, onnxruntime {machine['onnxruntime']}. "
        f"Command: `{machine['command']}`. GFLOP/s of each runtime's median call, the runtimes called in turn.",
        "",
        "| threads | rows x in -> out | XNNPACK | XNNPACK as a 1x1 convolution | ONNX Runtime | PyTorch "
        "| XNNPACK / ONNX Runtime time |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        rate, seconds = case["gflops"], case["median_s"]
        conv1x1 = f"{rate['xnnpack-conv1x1']:.0f}" if "xnnpack-conv1x1" in rate else "–"  # older records lack it
        lines.append(
            f"| {case['threads']} | {case['rows']} x {case['in_features']} -> {case['out_features']} "
            f"| {rate['xnnpack']:.0f} | {conv1x1} | {rate['onnxruntime']:.0f} | {rate['torch']:.0f} "
            f"| {seconds['xnnpack'] / seconds['onnxruntime']:.2f} |"
        )
    return [*lines, ""]


SECTIONS = {"pos_conv": pos_conv_section, "gemm-kernels": gemm_kernels_section}
"""Sections of other benchmarks, after the bench results (which come first, summary then details)."""


def codec_summary(results: list[dict]) -> list[str]:
    """One row per codec, method and length of `benchmarks/codec_methods.py`."""
    lines = [
        "## Codecs, method by method (`python benchmarks/codec_methods.py RECIPE --variant V`)",
        "",
        "A codec's program has an `encode` and a `decode` method (`audiodeploy bench --method` times one, lowered "
        "alone, in the table above): here both, on the program `export` writes, each "
        "method against its eager module and that module's ONNX export (`torch.onnx.export(dynamo=True)` at a dynamic "
        "length, given the program audiodeploy's `torch.export` makes where the padding is computed from 0-d integer "
        "tensors (Mimi, EnCodec), else its TorchScript exporter at each length; run as `bench` runs ONNX Runtime), "
        "alternated, on the same input (decode: the codes eager gives for that audio). EnCodec's LSTM fixes its "
        "program to one window (1 s): a longer input runs through `audiodeploy.runtime` in the windows `audiodeploy "
        "run` cuts (the input column says so; at 24 kHz each carries the LSTM's state to the next), while eager and "
        "ONNX Runtime run the model's own forward on the whole input. The last columns compare each runtime's output "
        "with eager's.",
        "",
        "| codec | method | input | measured on | delegates | audiodeploy | eager | ONNX Runtime | ours / eager "
        "| ours / ONNX Runtime | audiodeploy against eager | ONNX Runtime against eager |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        where = f"{result['machine']['processor']}, {result['machine']['threads']} thread(s)"
        for case in result["cases"]:
            # Records from before the ONNX Runtime column have none.
            onnx_ms = f"{case['onnxruntime_ms']:,.0f} ms" if "onnxruntime_ms" in case else "–"
            onnx_ratio = f"{case['onnxruntime_ratio']:.3f}" if "onnxruntime_ratio" in case else "–"
            windows = f", in {result['window_seconds']:g} s windows" if case.get("windowed") else ""
            lines.append(
                f"| {result['recipe']} {result['variant']} | {case['method']} | {case['seconds']:g} s{windows} "
                f"| {result['machine']['date'][:10]}, {where} | {result['methods'][case['method']]['delegates']} "
                f"| {case['audiodeploy_ms']:,.0f} ms | {case['eager_ms']:,.0f} ms "
                f"| {onnx_ms} | {case['ratio']:.3f} | {onnx_ratio} | {case['difference']} "
                f"| {case.get('onnxruntime_difference', '–')} |"
            )
    lines.append("")
    for result in results:
        if result.get("onnx_export", "").startswith("not exported"):
            lines.append(f"- {result['recipe']} {result['variant']}: no ONNX Runtime column, {result['onnx_export']}.")
    return lines + [""]


def codec_int8_summary(results: list[dict]) -> list[str]:
    """One row per codec of `benchmarks/codec_int8.py`."""
    lines = [
        "## Codecs and text to speech in int8 (`python benchmarks/codec_int8.py`)",
        "",
        "Each method of the codec's program lowered `int8-static`, calibrated on four speech-like signals (decode: "
        "on the codes eager encode gives for them), against the fp32 eager model on two others: encode by the codes "
        "that differ from fp32's, decode (on fp32's codes) by the waveform's SNR and log-mel distance (mean absolute "
        "difference of natural-log mels); VITS' decode (latents to speech) calibrated on four unit-normal latents. "
        "Synthetic weights: how int8 treats the architecture, not how a trained model sounds. These recipes export "
        "fp32 (README, int8).",
        "",
        "| codec | input | measured on | codes that differ (encode) | decode SNR | decode log-mel distance |",
        "|---|---|---|---|---|---|",
    ]
    for result in results:
        cases = result["cases"]
        differing = sum(c.get("codes_differing", 0) for c in cases)
        total = sum(c.get("codes", 0) for c in cases)
        codes = f"{differing} of {total} ({100 * differing / total:.0f}%)" if total else "– (no encode)"
        snr = ", ".join(f"{c['decode_snr_db']:.1f}" for c in cases)
        distance = ", ".join(f"{c['decode_log_mel_distance']:.3f}" for c in cases)
        lines.append(
            f"| {result['recipe']} {result['variant']} | {len(cases)} x {result['seconds']:g} s "
            f"| {result['machine']['date'][:10]}, {result['machine']['processor']} "
            f"| {codes} | {snr} dB | {distance} |"
        )
    return lines + [""]


def tts_summary(results: list[dict]) -> list[str]:
    """One row per voice and text of `benchmarks/tts.py`."""
    lines = [
        "## Text to speech, whole chain (`python benchmarks/tts.py vits.pte`)",
        "",
        "What `audiodeploy run vits.pte TEXT` runs (per sentence: `encode`, the host's durations and noise, `decode`) "
        "against eager transformers `VitsModel` with the same weights and seed, alternated; both give the same "
        "samples; ONNX Runtime runs `VitsModel` exported whole as Piper does (its own noise: the same frames, other "
        "samples). The durations' noise is 0 in all three, so that each speaks the same frames. RTF: seconds of "
        "computing per second of speech.",
        "",
        "| voice | text | measured on | delegates (encode / decode) | speech | audiodeploy (RTF) | eager (RTF) "
        "| ONNX Runtime (RTF) | ours / eager | ours / ONNX Runtime | max abs diff from eager |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        where = f"{result['machine']['processor']}, {result['machine']['threads']} thread(s)"
        delegates = " / ".join(str(result["methods"][m]["delegates"]) for m in ("encode", "decode"))
        for case in result["cases"]:
            lines.append(
                f"| {result['recipe']} {result['variant']} | {case['text']} ({case['sentences']} sentence(s)) "
                f"| {result['machine']['date'][:10]}, {where} | {delegates} | {case['speech_seconds']:.1f} s "
                f"| {case['audiodeploy_ms']:,.0f} ms ({case['audiodeploy_rtf']:.3f}) "
                f"| {case['eager_ms']:,.0f} ms ({case['eager_rtf']:.3f}) "
                f"| {case['onnxruntime_ms']:,.0f} ms ({case['onnxruntime_rtf']:.3f}) | {case['ratio']:.3f} "
                f"| {case['onnxruntime_ratio']:.3f} | {case['max_abs_diff']:.1e} |"
            )
    return lines + [""]


def load_results(directory: Path = RESULTS) -> list[dict]:
    """Every result file; a bench record is read through `BenchRecord` first, so that one that does not follow
    ``audiodeploy.bench/1`` is an error naming the file and field, not a wrong table."""
    from audiodeploy.bench.results import SCHEMA, read_json

    results = []
    for path in sorted(directory.glob("*.json")):
        result = json.loads(path.read_text())
        results.append(read_json(path) if result.get("schema") == SCHEMA else result)
    return results


def render(results: list[dict] | None = None) -> str:
    results = load_results() if results is None else results
    lines = [
        "# Models and measured figures",
        "",
        "Generated by `python benchmarks/generate_models_md.py` from `benchmarks/results/*.json`; do not edit by hand.",
        "",
    ]
    bench = [r for r in results if r.get("benchmark") == "bench"]
    local = [r for r in bench if r["transport"]["kind"] == "local"]
    devices = [r for r in bench if r["transport"]["kind"] != "local"]
    if local:
        lines += bench_summary(local)
    if devices:
        lines += device_summary(devices)
    int8 = [r for r in local if _is_int8(r)]
    if int8:
        lines += int8_summary(int8)
    fp16 = [r for r in local if _is_fp16(r)]
    if fp16:
        lines += fp16_summary(fp16)
    fidelity = [r for r in results if r.get("benchmark") == "int8-fidelity"]
    if fidelity:
        lines += int8_fidelity_summary(fidelity)
    codecs = [r for r in results if r.get("benchmark") == "codec-methods"]
    if codecs:
        lines += codec_summary(codecs)
    codecs_int8 = [r for r in results if r.get("benchmark") == "codec-int8"]
    if codecs_int8:
        lines += codec_int8_summary(codecs_int8)
    voices = [r for r in results if r.get("benchmark") == "tts"]
    if voices:
        lines += tts_summary(voices)
    if bench:
        for result in bench:
            lines += bench_section(result)
    for result in results:
        section = SECTIONS.get(result.get("benchmark"))
        if section is not None:
            lines += section(result)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    atomic_write_text(ROOT / "models.md", render())
    print(f"wrote {ROOT / 'models.md'}")
