"""What ExecuTorch's ``executor_runner`` prints, for the adb transport's tests.

The messages are the runner's own format strings (``examples/portable/executor_runner/
executor_runner.cpp`` of ExecuTorch, the same source ``xnn_executor_runner`` is built from),
each behind the prefix that the posix PAL (``runtime/platform/default/posix.cpp``) writes:

    fprintf(stderr, "%c %02u:%02u:%02u.%06lu executorch:%s:%zu] %s\\n", level, hour, min, sec, us, filename, line, message)

    ET_LOG(Info, "Resetting threadpool with num threads = %d", num_performant_cores);
    ET_LOG(Info, "Model file %s is loaded.", FLAGS_model_path.c_str());
    ET_LOG(Info, "Using method %s", method_name);
    ET_LOG(Info, "Setting up CPU planned buffer %zu, size %zu.", id, buffer_size);
    ET_LOG(Info, "Model loaded in %f ms.", ...);
    ET_LOG(Info, "Iteration %" PRIu32 " of %" PRIu32 ": %f ms", i + 1, FLAGS_num_executions, ...);
    ET_LOG(Info, "Model executed successfully %" PRIu32 " time(s) in %f ms.", FLAGS_num_executions, ...);
    ET_LOG(Info, "%zu outputs: ", outputs.size());
    ET_LOG(Error, "Failed to parse model file %s", FLAGS_model_path.c_str());
    ET_CHECK_MSG(method.ok(), "Loading of method %s failed with status 0x%" PRIx32, ...)
        -> ET_LOG(Fatal, "In function %s(), assert failed" " (%s): " _format, ...)   (runtime/platform/assert.h)

Runners from before the per-iteration line (2025 sources) print "Setting up planned buffer
%zu, size %zu.", "Method loaded." and only the total. The ``file:line`` in the prefix varies
between versions; the parser ignores it.
"""

from __future__ import annotations


def prefix(level: str, micros: int, line: int) -> str:
    seconds, us = divmod(micros, 1_000_000)
    return f"{level} 00:00:{seconds:02d}.{us:06d} executorch:executor_runner.cpp:{line}] "


def current_runner_log(model: str, iterations_ms: list[float], load_ms: float = 118.204, threads: int = 4) -> str:
    """A successful run of the current runner (per-iteration times, load time)."""
    lines = [
        prefix("I", 312, 406) + "Resetting threadpool with num threads = %d" % threads,
        prefix("I", 8113, 528) + "Model file %s is loaded." % model,
        prefix("I", 8140, 538) + "Using method %s" % "forward",
        prefix("I", 8191, 588) + "Setting up CPU planned buffer %d, size %d." % (0, 2112),
        prefix("I", 126_407, 664) + "Model loaded in %f ms." % load_ms,
    ]
    clock = 126_407
    for i, ms in enumerate(iterations_ms, 1):
        clock += int(ms * 1000)
        lines.append(prefix("I", clock, 793) + "Iteration %d of %d: %f ms" % (i, len(iterations_ms), ms))
    lines.append(
        prefix("I", clock + 40, 802)
        + "Model executed successfully %d time(s) in %f ms." % (len(iterations_ms), sum(iterations_ms))
    )
    lines.append(prefix("I", clock + 61, 811) + "%d outputs: " % 1)
    lines.append("OutputX 0: tensor(sizes=[1, 4], [0.113416, -0.348217, 0.0124421, 0.420915])")
    return "\n".join(lines) + "\n"


def older_runner_log(model: str, executions: int, total_ms: float) -> str:
    """A successful run of a runner that prints only the total (2025 sources)."""
    return (
        "\n".join(
            [
                prefix("I", 301, 241) + "Resetting threadpool with num threads = %d" % 4,
                prefix("I", 7012, 334) + "Model file %s is loaded." % model,
                prefix("I", 7030, 343) + "Using method %s" % "forward",
                prefix("I", 7066, 386) + "Setting up planned buffer %d, size %d." % (0, 2112),
                prefix("I", 98_230, 416) + "Method loaded.",
                prefix("I", 98_230 + int(total_ms * 1000), 460)
                + "Model executed successfully %d time(s) in %f ms." % (executions, total_ms),
                prefix("I", 98_301 + int(total_ms * 1000), 468) + "%d outputs: " % 1,
                "OutputX 0: tensor(sizes=[1, 4], [0.113416, -0.348217, 0.0124421, 0.420915])",
            ]
        )
        + "\n"
    )


def method_load_failure_log(model: str) -> str:
    """The runner aborting (exit 134) because the program's method cannot be loaded."""
    return (
        "\n".join(
            [
                prefix("I", 290, 406) + "Resetting threadpool with num threads = %d" % 4,
                prefix("I", 7902, 528) + "Model file %s is loaded." % model,
                prefix("I", 7930, 538) + "Using method %s" % "forward",
                prefix("F", 9114, 655)
                + "In function %s(), assert failed (%s): Loading of method %s failed with status 0x%x"
                % ("main", "method.ok()", "forward", 0x20),
            ]
        )
        + "\n"
    )


def parse_failure_log(model: str) -> str:
    """The runner returning 1 because the file is not a program."""
    return (
        prefix("I", 288, 406)
        + "Resetting threadpool with num threads = %d\n" % 4
        + (prefix("E", 871, 523) + "Failed to parse model file %s\n" % model)
    )
