"""``--device``: which transport a spec names (:func:`parse_device`), and the ssh destination it may carry."""

from __future__ import annotations

from dataclasses import dataclass

from audiodeploy.bench.errors import BenchError

RUNNER_DEVICES = {"native": "host", "qemu-aarch64": "linux-aarch64"}
"""--device -> the runner build it runs on this machine (audiodeploy.native)."""

DEVICE_CHOICES = "'local', 'native', 'qemu-aarch64', 'adb', 'adb:SERIAL' or 'ssh:[USER@]HOST[:PORT]'"


@dataclass(frozen=True)
class SshDestination:
    """Where ``--device ssh:[USER@]HOST[:PORT]`` points: the host, and the user and port when given."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> SshDestination:
        """``[USER@]HOST[:PORT]``; a host or user that ssh would read as an option is refused."""
        user, at, host = text.rpartition("@")
        port = None
        if host.count(":") == 1:
            host, _, port_text = host.partition(":")
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise BenchError(f"--device ssh:{text}: the port {port_text!r} is not a number from 1 to 65535")
            port = int(port_text)
        if (
            not host
            or host.startswith("-")
            or (at and (not user or user.startswith("-") or "@" in user))
            or any(c.isspace() for c in text)
        ):
            raise BenchError(f"--device ssh:{text}: give ssh:[USER@]HOST[:PORT], e.g. ssh:pi@raspberrypi.local")
        return cls(host, user or None, port)

    @property
    def target(self) -> str:
        """``[USER@]HOST``, as ssh and scp take it."""
        return f"{self.user}@{self.host}" if self.user else self.host

    def __str__(self) -> str:
        return self.target + (f":{self.port}" if self.port else "")


def parse_device(spec: str) -> tuple[str, str | None]:
    """``local``, ``native``, ``qemu-aarch64`` -> (the same, None); ``adb`` -> (adb, None); ``adb:SERIAL`` ->
    (adb, SERIAL); ``ssh:[USER@]HOST[:PORT]`` -> (ssh, the destination, checked)."""
    if spec in ("local", *RUNNER_DEVICES):
        return spec, None
    if spec == "adb":
        return "adb", None
    if spec.startswith("adb:") and spec[4:].strip():
        return "adb", spec[4:].strip()
    if spec.startswith("ssh:") and spec[4:].strip():
        return "ssh", str(SshDestination.parse(spec[4:].strip()))
    raise BenchError(f"--device {spec!r}: give {DEVICE_CHOICES} (a serial from `adb devices`)")
