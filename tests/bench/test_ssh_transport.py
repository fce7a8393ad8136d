"""``--device ssh:[USER@]HOST[:PORT]`` against a real ``sshd`` that the test starts on 127.0.0.1.

No arm64 board is reachable here. The "board" is this x86-64 machine, reached over loopback ssh: the test makes
a host key, a client key (authorized for the current user) and an ssh config, and starts ``/usr/sbin/sshd`` on
a free high port, listening on 127.0.0.1 only. ssh and scp are the real ones, with ``BatchMode=yes`` and
``StrictHostKeyChecking=no`` (through ``$AUDIODEPLOY_SSH_OPTIONS="-F CONFIG"`` for the command). Since the
board's ``uname -m`` is x86_64, the transport picks the host build of the runner; the linux-aarch64 build it
would copy to an arm64 board is the one tests/native runs under qemu-aarch64.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from audiodeploy.bench import BenchRequest, run_bench
from audiodeploy.bench.errors import BenchError
from audiodeploy.bench.results import validate
from audiodeploy.bench.runtimes import ExecuTorchRuntime, RuntimeInfo
from audiodeploy.bench.transports import RunCounts, SshTransport
from tests.native.conftest import CHANNELS

SSHD = "/usr/sbin/sshd"
ATOL = 1e-5


@dataclass(frozen=True)
class Sshd:
    port: int
    config: Path
    """The client's ssh config (key, known-hosts file, no host key prompt)."""

    @property
    def device(self) -> str:
        return f"ssh:{getpass.getuser()}@127.0.0.1:{self.port}"

    @property
    def options(self) -> list[str]:
        return ["-F", str(self.config)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    if not Path(SSHD).is_file() or shutil.which("ssh") is None or shutil.which("scp") is None:
        pytest.skip(
            "sshd, ssh or scp not installed (apt-get install -y openssh-server openssh-client); CI installs them"
        )
    root = tmp_path_factory.mktemp("sshd")
    _keygen(root / "host_key")
    _keygen(root / "client_key")
    shutil.copy(root / "client_key.pub", root / "authorized_keys")
    port = _free_port()
    (root / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\nAllowUsers {getpass.getuser()}\nStrictModes no\nUsePAM no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\nLogLevel ERROR\n"
    )
    config = root / "ssh_config"
    config.write_text(
        f"Host *\n  IdentityFile {root / 'client_key'}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
        f"  UserKnownHostsFile {root / 'known_hosts'}\n  LogLevel ERROR\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config")], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        while True:
            if server.poll() is not None:
                pytest.fail(f"sshd exited with {server.returncode}: {server.stderr.read().strip()}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                pytest.fail("sshd did not listen within 15 s")
            time.sleep(0.1)
        yield Sshd(port, config)
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def cache_env(runner_cache, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("AUDIODEPLOY_CACHE_DIR", str(runner_cache))
    return {"AUDIODEPLOY_CACHE_DIR": str(runner_cache)}


def _runtime(name: str, buffer: bytes) -> ExecuTorchRuntime:
    return ExecuTorchRuntime(RuntimeInfo(name=name, label=name, engine="executorch"), buffer, origin=f"{name}.pte")


def test_runner_over_ssh_matches_eager_and_removes_its_folder(sshd, cache_env, host_runner, tiny_program):
    transport = SshTransport.for_device(sshd.device[4:], options=sshd.options)
    assert transport.built.target == "host"  # the "board" is this x86-64 machine
    assert transport.device["machine"] == "x86_64"
    x = torch.randn(1, CHANNELS, 40)
    try:
        measured = transport.measure(
            [_runtime("audiodeploy", tiny_program.path.read_bytes())], (x,), {"audiodeploy": RunCounts(runs=3, warmup=1)},
            threads=1,
        )["audiodeploy"]  # fmt: skip
        remote_dir = Path(transport.remote_dir)
        assert remote_dir.name.startswith("audiodeploy-bench.") and (remote_dir / "audiodeploy-runner").is_file()
        assert not (remote_dir / "audiodeploy").exists()  # the program's folder went after its run
    finally:
        transport.close([])
    assert not remote_dir.exists()
    torch.testing.assert_close(measured.output, tiny_program.eager(x), atol=ATOL, rtol=0)
    assert measured.latency.runs == 3 and len(measured.latency.samples_s) == 3
    assert measured.notes[0] == "runner threadpool: 1 thread(s)"
    described = transport.describe()
    assert described.kind == "ssh" and described.host == "127.0.0.1" and described.port == sshd.port
    assert described.device.cpu.architecture == "x86_64"


def test_bench_over_ssh_writes_the_same_record(sshd, cache_env, host_runner, linear_pte, monkeypatch):
    """run_bench as `audiodeploy bench linear.pte --device ssh:USER@127.0.0.1:PORT` runs it, with the options
    from the environment as a user would give them (tests/bench/test_adb_bundle.py runs the command itself)."""
    monkeypatch.setenv("AUDIODEPLOY_SSH_OPTIONS", f"-F {sshd.config}")
    record = validate(run_bench(BenchRequest(str(linear_pte), device=sshd.device, runs=2, warmup=1)))
    assert record["transport"]["kind"] == "ssh" and record["transport"]["target"] == "host"
    assert record["transport"]["device"]["machine"] == "x86_64" and record["machine"]["threads"] is None
    figures = record["cases"][0]["runtimes"]["pte"]
    assert figures["latency"]["runs"] == 2 and figures["load_s"] > 0 and figures["peak_rss_bytes"] > 0


def test_a_runner_that_fails_over_ssh_is_one_line_and_cleans_up(sshd, cache_env, host_runner):
    transport = SshTransport.for_device(sshd.device[4:], options=sshd.options)
    with pytest.raises(BenchError) as raised:
        try:
            transport.measure(
                [_runtime("broken", b"not a program" * 8)], (torch.zeros(1, CHANNELS, 8),), {"broken": RunCounts(1, 0)}
            )
        finally:
            remote_dir = Path(transport.remote_dir)
            transport.close([])
    message = str(raised.value)
    assert "\n" not in message and message.startswith(
        f"broken on ssh {sshd.device[4:]}: the host runner failed: loading program"
    )
    assert not remote_dir.exists()


def test_a_board_that_does_not_answer_is_one_line(sshd, cache_env, linear_pte, monkeypatch):
    monkeypatch.setenv("AUDIODEPLOY_SSH_OPTIONS", f"-F {sshd.config}")
    closed = _free_port()
    with pytest.raises(BenchError) as raised:
        run_bench(BenchRequest(str(linear_pte), device=f"ssh:127.0.0.1:{closed}"))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"ssh 127.0.0.1:{closed} is not reachable (ssh: connect to host 127.0.0.1 port {closed}: Connection refused)"
    )
