"""The project's runner on another machine. The remote runners write one JSON report (schema
``audiodeploy.runner/1``) and their outputs as raw files (:mod:`audiodeploy.native.run`), so adb
(:mod:`~audiodeploy.bench.transports.adb`) and ssh (:mod:`~audiodeploy.bench.transports.ssh`) share this one
implementation and differ only in how files and commands travel."""

from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch

from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.runtimes import ExecuTorchRuntime, Runtime
from audiodeploy.bench.transports.base import (
    SCRATCH_PREFIX,
    Log,
    Measurement,
    RunCounts,
    Transport,
    last_line,
    measure_programs,
    quiet,
)
from audiodeploy.bench.transports.project_runner import report_measurement, run_options
from audiodeploy.native import (
    BuiltRunner,
    NativeError,
    NativeRun,
    check_input_dtypes,
    parse_report,
    read_outputs,
    runner_arguments,
    runner_error_line,
    write_inputs,
)
from audiodeploy.native.run import RunnerCpu, RunnerReport

_EXIT_MARKER = "audiodeploy-runner-exit="
_EXIT = re.compile(re.escape(_EXIT_MARKER) + r"(\d+)\s*$", re.MULTILINE)

InputFiles = list[tuple[Path, tuple[int, ...]]]
"""The inputs written as raw files (:func:`audiodeploy.native.write_inputs`), each with its shape."""


class RemoteRunnerTransport(Transport):
    """The project's runner on another machine, run in a folder there that holds the runner (copied once) and,
    per program, a subfolder with the program and its inputs::

        REMOTE/audiodeploy-runner, lib*.so [, ld-linux-aarch64.so.1, libc.so.6, ...]
        REMOTE/NAME/model.pte, input_0.bin          pushed
        REMOTE/NAME/report.json, outputs/           written by the runner, pulled back whole

    The runner's exit status comes back on stdout (``audiodeploy-runner-exit=N``), since adb without its
    shell protocol drops it; its one ``error:`` line comes back on stderr (or stdout, merged by old adb).
    Subclasses say how commands and files travel (:meth:`_shell`, :meth:`_push`, :meth:`_pull`), where the
    folder is (:meth:`_make_remote_dir`) and how the runner starts (:attr:`launcher`).
    """

    programs_per_length = False
    launcher: tuple[str, ...] = ("./audiodeploy-runner",)
    built: BuiltRunner
    where: str
    """How messages name the device: 'adb device SERIAL', 'ssh pi@board'."""

    def __init__(self) -> None:
        self.device: dict[str, str] = {}
        """What the device says of itself (adb: model, abi, android; ssh: hostname, machine)."""
        self.cpu: RunnerCpu | None = None
        """The CPU the runner reported, once it ran."""
        self.remote_dir: str | None = None

    # What a subclass provides.

    def _shell(self, command: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `command` in a shell on the device; a failure is a BenchError when `check`."""
        raise NotImplementedError

    def _push(self, files: Sequence[Path], remote_dir: str) -> None:
        """Copy `files` into the device's folder `remote_dir`."""
        raise NotImplementedError

    def _pull(self, remote: str, local_dir: Path) -> None:
        """Copy the device's `remote` (a folder, whole) into `local_dir`."""
        raise NotImplementedError

    def _make_remote_dir(self) -> str:
        """Make the empty folder on the device that will hold the runner and the programs; its path."""
        raise NotImplementedError

    # Shared.

    def _runner_files(self) -> list[Path]:
        return sorted(p for p in self.built.directory.iterdir() if p.is_file() and not p.name.startswith("."))

    def _install_runner(self, log: Log) -> str:
        """Copy the runner to the device, the first time only; the folder that holds it there."""
        if self.remote_dir is None:
            files = self._runner_files()
            size = sum(p.stat().st_size for p in files) / 2**20
            remote_dir = self._make_remote_dir()
            self.remote_dir = remote_dir  # from here on, close() removes it
            log(
                f"copying the {self.built.target} runner ({len(files)} files, {size:.1f} MiB) to {self.where}:{remote_dir}"
            )
            self._push(files, remote_dir)
            executables = [
                shlex.quote(name)
                for name in ("audiodeploy-runner", "ld-linux-aarch64.so.1")
                if any(p.name == name for p in files)
            ]
            self._shell(f"cd {shlex.quote(remote_dir)} && chmod 755 {' '.join(executables)}")
        return self.remote_dir

    def script(self, name: str, arguments: Sequence[str]) -> str:
        """The shell command that runs the runner for program folder `name` (relative paths, from REMOTE)."""
        assert self.remote_dir is not None
        command = shlex.join([*self.launcher, *arguments])
        return f"cd {shlex.quote(self.remote_dir)} && {command} >{shlex.quote(name)}/report.json; echo {_EXIT_MARKER}$?"

    def measure(
        self,
        runtimes: Sequence[Runtime],
        inputs: tuple[torch.Tensor, ...],
        counts: dict[str, RunCounts],
        log: Log = quiet,
        threads: int | None = None,
    ) -> dict[str, Measurement]:
        remote_dir = self._install_runner(log)
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX) as scratch:
            local = Path(scratch)
            (local / "inputs").mkdir()
            input_files = write_inputs(inputs, local / "inputs")
            measure_program = partial(
                self._measure_program, remote_dir=remote_dir, local=local, inputs=inputs,
                input_files=input_files, threads=threads, log=log,
            )  # fmt: skip
            return measure_programs(runtimes, counts, f"in the runner on {self.where}", measure_program)

    def _measure_program(
        self,
        runtime: ExecuTorchRuntime,
        counts: RunCounts,
        *,
        remote_dir: str,
        local: Path,
        inputs: tuple[torch.Tensor, ...],
        input_files: InputFiles,
        threads: int | None,
        log: Log,
    ) -> Measurement:
        """Push one program beside the inputs into REMOTE/NAME, run it there, and pull its report and outputs."""
        name = runtime.name
        folder = f"{remote_dir}/{name}"
        program = local / "model.pte"
        program.write_bytes(runtime.buffer)
        log(f"pushing {name} ({len(runtime.buffer) / 2**20:.1f} MiB) to {self.where}")
        self._shell(f"mkdir -p {shlex.quote(folder)}")
        self._push([program, *(path for path, _ in input_files)], folder)
        arguments = runner_arguments(
            f"{name}/model.pte", [(f"{name}/{path.name}", shape) for path, shape in input_files],
            run_options(counts, threads), output_dir=f"{name}/outputs",
        )  # fmt: skip
        command = self.script(name, arguments)
        log(f"running {name} on {self.where}: {command}")
        start = time.monotonic()
        done = self._shell(command, timeout=3600, check=False)
        wall_s = time.monotonic() - start
        self._check_exit(name, done)
        report, outputs = self._fetch_results(name, folder, local / "pulled")
        try:
            check_input_dtypes(report, inputs)
        except NativeError as error:
            raise BenchError(f"{name} on {self.where}: {error}") from None
        self.cpu = report.cpu
        return report_measurement(NativeRun(report=report, outputs=outputs, wall_s=wall_s), counts)

    def _fetch_results(self, name: str, folder: str, pulled: Path) -> tuple[RunnerReport, list[torch.Tensor]]:
        """Pull the program's folder into `pulled`, remove it from the device, and read its report and outputs."""
        pulled.mkdir(exist_ok=True)
        self._pull(folder, pulled)
        self._shell(f"rm -rf {shlex.quote(folder)}", check=False)
        try:
            return parse_report((pulled / name / "report.json").read_text()), read_outputs(pulled / name / "outputs")
        except (NativeError, OSError) as error:
            raise BenchError(f"{name} on {self.where}: {error}") from None

    def _check_exit(self, name: str, done: subprocess.CompletedProcess[str]) -> None:
        """A BenchError quoting the runner when it did not start or did not exit 0 (the status it echoed)."""
        match = _EXIT.search(done.stdout)
        said = "\n".join(line for line in (done.stderr + "\n" + done.stdout).splitlines() if _EXIT_MARKER not in line)
        if match is None:
            reason = last_line(said) or f"exit status {done.returncode}, no output"
            raise BenchError(f"{name} on {self.where}: the runner did not run ({reason})")
        status = int(match[1])
        if status != 0:
            message = runner_error_line(said, status if status < 128 else -(status - 128))
            raise BenchError(f"{name} on {self.where}: the {self.built.target} runner failed: {message}")

    def close(self, runtimes: Sequence[Runtime]) -> None:
        if self.remote_dir is not None:
            self._shell(f"rm -rf {shlex.quote(self.remote_dir)}", check=False)
            self.remote_dir = None
