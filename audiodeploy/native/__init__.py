"""The native runner: the project's C++ runner (``runner/``) built against the executorch wheel for this machine,
arm64 Linux or an Android bundle, and run from Python.

    from audiodeploy.native import RunOptions, build_runner, run_runner
    built = build_runner("linux-aarch64")                 # cached per target, executorch version and sources
    run = run_runner(built, "model.pte", [waveform], RunOptions(iterations=5))  # under qemu-aarch64 on x86-64
    run.report.latencies_ms, run.outputs[0]               # the report is a RunnerReport

Nothing here imports torch until tensors are made.
"""

from audiodeploy.native.build import TARGETS, BuiltRunner, Target, build_runner, copy_runner, default_cache_dir
from audiodeploy.native.errors import NativeError
from audiodeploy.native.run import (
    NativeRun,
    RunnerReport,
    RunOptions,
    check_input_dtypes,
    is_emulated,
    parse_report,
    read_outputs,
    run_runner,
    runner_arguments,
    runner_error_line,
    write_inputs,
)

__all__ = [
    "TARGETS",
    "BuiltRunner",
    "NativeError",
    "NativeRun",
    "RunOptions",
    "RunnerReport",
    "Target",
    "build_runner",
    "check_input_dtypes",
    "copy_runner",
    "default_cache_dir",
    "is_emulated",
    "parse_report",
    "read_outputs",
    "run_runner",
    "runner_arguments",
    "runner_error_line",
    "write_inputs",
]
