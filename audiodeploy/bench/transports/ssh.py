"""``--device ssh:[USER@]HOST[:PORT]``: an arm64 Linux board (Raspberry Pi, Jetson, Graviton): the linux-aarch64
runner folder and the program go over scp, the runner runs over ssh, its report and outputs come back over scp."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

from audiodeploy.bench.device import SshDestination
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import SshDevice, SshTransportDescription
from audiodeploy.bench.transports.base import Log, last_line, quiet
from audiodeploy.bench.transports.project_runner import build_for_device
from audiodeploy.bench.transports.remote import RemoteRunnerTransport
from audiodeploy.native import BuiltRunner

SSH_OPTIONS_ENV = "AUDIODEPLOY_SSH_OPTIONS"
"""Extra options for both ssh and scp (``-F CONFIG``, ``-i KEY``, ``-o NAME=VALUE``), shell-quoted."""
_ARM64 = ("aarch64", "arm64")


class SshTransport(RemoteRunnerTransport):
    """``--device ssh:[USER@]HOST[:PORT]``: an arm64 Linux board. The linux-aarch64 runner folder (the runner and
    the wheel's libraries; the board's own glibc serves) goes to a ``mktemp -d`` folder under /tmp over scp,
    each program and its inputs follow, the runner runs over ssh, its report and outputs come back over scp,
    and the folder is removed when the bench ends.

    ssh runs non-interactively (``BatchMode=yes``): a key or agent must let ``ssh [USER@]HOST true`` in
    without a password. Your ssh configuration applies; more options for both ssh and scp go in
    ``$AUDIODEPLOY_SSH_OPTIONS``. The build is chosen by the board's ``uname -m``: linux-aarch64 for an arm64
    board, the host build for a machine of this one's architecture (a loopback test, an x86-64 server).
    """

    kind = "ssh"

    def __init__(
        self,
        destination: SshDestination,
        built: BuiltRunner | None,
        options: Sequence[str] = (),
        ssh: str = "ssh",
        scp: str = "scp",
    ) -> None:
        super().__init__()
        self.destination = destination
        self.built = built  # type: ignore[assignment]  # None until for_device has seen the board
        self.options = list(options)
        self.ssh = ssh
        self.scp = scp
        self.where = f"ssh {destination}"

    @staticmethod
    def default_options() -> list[str]:
        """The options in ``$AUDIODEPLOY_SSH_OPTIONS``, split as a shell would."""
        return shlex.split(os.environ.get(SSH_OPTIONS_ENV, ""))

    @classmethod
    def for_device(
        cls,
        destination: str,
        log: Log = quiet,
        options: Sequence[str] | None = None,
        ssh: str = "ssh",
        scp: str = "scp",
    ) -> SshTransport:
        """Check the board first (reachable, which architecture), then build or take its runner from the cache."""
        options = cls.default_options() if options is None else list(options)
        transport = cls(SshDestination.parse(destination), None, options, ssh, scp)
        machine, hostname = transport.connect()
        transport.device.update({"hostname": hostname, "machine": machine})
        transport.built = build_for_device(cls.target_for(machine, str(transport.destination)), "ssh", log)
        return transport

    @staticmethod
    def target_for(machine: str, destination: str) -> str:
        """The runner build for a board whose ``uname -m`` is `machine`; a BenchError for one none fits."""
        if machine in _ARM64:
            return "linux-aarch64"
        if machine == platform.machine():
            return "host"
        raise BenchError(
            f"ssh {destination} is a {machine} machine; the runner is built for arm64 Linux (linux-aarch64) or for "
            f"this machine's {platform.machine()}"
        )

    def _base(self, program: str, port_flag: str) -> list[str]:
        """`program` (ssh or scp) with the options both take; the port flag differs (-p, -P)."""
        port = [port_flag, str(self.destination.port)] if self.destination.port else []
        return [program, "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", *port, *self.options]

    def ssh_command(self, command: str) -> list[str]:
        """The ssh command line that runs `command` on the board."""
        return [*self._base(self.ssh, "-p"), "--", self.destination.target, command]

    def scp_command(self, sources: Sequence[str], destination: str) -> list[str]:
        """The scp command line that copies `sources` (folders whole) to `destination`."""
        return [*self._base(self.scp, "-P"), "-q", "-r", "-p", "--", *sources, destination]

    def _run(self, command: list[str], timeout: float, check: bool) -> subprocess.CompletedProcess[str]:
        """Run an ssh or scp command; a missing tool, a timeout, an unreachable board (ssh's exit status 255)
        and (when `check`) a failure are one-line BenchErrors."""
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise BenchError(
                f"{command[0]}: not found on PATH; install it: apt-get install -y openssh-client"
            ) from None
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"`{shlex.join(command)}` did not finish in {timeout:.0f} s; is {self.destination} still up?"
            ) from None
        if done.returncode == 255 and command[0] == self.ssh:
            raise BenchError(
                f"{self.where} is not reachable ({last_line(done.stderr) or 'exit status 255'}); check that "
                f"`ssh {self.destination.target}` logs in without a password"
            )
        if check and done.returncode != 0:
            raise BenchError(
                f"`{shlex.join(command)}` failed: {last_line(done.stderr + done.stdout) or f'exit {done.returncode}'}"
            )
        return done

    def connect(self) -> tuple[str, str]:
        """The board's ``uname -m`` and host name; a board that does not answer is a one-line BenchError."""
        done = self._run(self.ssh_command("uname -m; uname -n"), timeout=60, check=False)
        lines = done.stdout.split()
        if done.returncode != 0 or len(lines) < 2:
            reason = last_line(done.stderr + done.stdout) or f"exit status {done.returncode}"
            raise BenchError(
                f"{self.where} is not reachable ({reason}); check that `ssh {self.destination.target}` logs in without a password"
            )
        return lines[0], lines[1]

    def describe(self) -> SshTransportDescription:
        device = self.device
        return SshTransportDescription(
            kind="ssh",
            host=self.destination.host,
            user=self.destination.user,
            port=self.destination.port,
            runtime="audiodeploy-runner (C++, ExecuTorch runtime from the executorch wheel) over ssh",
            target=self.built.target,
            runner=str(self.built.directory),
            executorch=self.built.executorch_version,
            device=SshDevice(hostname=device["hostname"], machine=device["machine"], cpu=self.cpu) if device else None,
        )

    def _remote(self, path: str) -> str:
        """`path` on the board, as scp names it."""
        return f"{self.destination.target}:{path}"

    def _shell(self, command: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self._run(self.ssh_command(command), timeout, check)

    def _push(self, files: Sequence[Path], remote_dir: str) -> None:
        self._run(self.scp_command([str(f) for f in files], self._remote(remote_dir + "/")), timeout=1800, check=True)

    def _pull(self, remote: str, local_dir: Path) -> None:
        self._run(self.scp_command([self._remote(remote)], str(local_dir) + "/"), timeout=1800, check=True)

    def _make_remote_dir(self) -> str:
        made = self._shell("mktemp -d /tmp/audiodeploy-bench.XXXXXX").stdout.strip()
        if not made.startswith("/tmp/audiodeploy-bench."):
            raise BenchError(f"{self.where}: mktemp gave {made!r}, not a folder under /tmp")
        return made
