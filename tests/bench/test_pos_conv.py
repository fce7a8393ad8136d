"""``audiodeploy bench pos-conv`` through the command: wav2vec2's weight-normed positional convolution lowered the
stock way and by audiodeploy, both run in the project's runner (on this machine, and on arm64 under qemu), at a
tiny size (stock lowering leaves the convolution on portable kernels, which qemu emulates slowly)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from audiodeploy.bench.results import validate
from tests.cli import OFFLINE, assert_clean_error, audiodeploy

TINY = ("--channels", "32", "--kernel", "8", "--groups", "4", "--length", "20")
FEW_RUNS = ("--runs", "2", "--warmup", "0", "--stock-runs", "1", "--stock-warmup", "0")
# XNNPACK's arm64 kernels sum in another order than its x86-64 ones; the portable kernels in another than eager's.
ATOL = 1e-5


def table_rows(stdout: str) -> dict[str, list[str]]:
    """The table's rows by lowering label, each split into its columns (cells are 2+ spaces apart)."""
    rows = {}
    for line in stdout.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] in ("stock ExecuTorch (fold=False)", "audiodeploy (fold=True)"):
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize(
    "device, runner, where",
    [
        ("native", "host_runner", "on this machine (native runner)"),
        ("qemu-aarch64", "arm64_runner", "on emulated arm64 (qemu-aarch64"),
    ],
)
def test_pos_conv_in_the_runner_leaves_the_stock_conv_on_portable_kernels_and_folds_it_into_the_delegate(
    tmp_path: Path, request, runner_cache: Path, device: str, runner: str, where: str
):
    request.getfixturevalue(runner)  # built (or skipped) once per session, in the cache the command is given
    result = audiodeploy(
        "bench", "pos-conv", *TINY, *FEW_RUNS, "--device", device, "--json", str(tmp_path / "r.json"),
        env={**OFFLINE, "AUDIODEPLOY_CACHE_DIR": str(runner_cache)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "weight_norm(Conv1d(32, 32, 8, padding=4, groups=4), dim=2) on (1, 32, 20) fp32" in result.stdout
    assert where in result.stdout

    rows = table_rows(result.stdout)
    _, stock_delegates, stock_portable, _, stock_runs, stock_diff = rows["stock ExecuTorch (fold=False)"]
    _, folded_delegates, folded_portable, _, folded_runs, folded_diff = rows["audiodeploy (fold=True)"]
    assert "convolution" in stock_portable.split(", ")
    assert folded_portable == "none" and folded_delegates == "1"
    assert (stock_runs, folded_runs) == ("1+0", "2+0")
    assert float(stock_diff) < ATOL and float(folded_diff) < ATOL
    assert re.search(r"^audiodeploy/stock: .*\(audiodeploy [0-9.,]+x (faster|slower)\)$", result.stdout, re.MULTILINE)

    record = validate(json.loads((tmp_path / "r.json").read_text()))
    assert list(record["runtimes"]) == ["stock", "audiodeploy"]  # the runner alone: no in-process rows beside it
    assert record["runtimes"]["stock"]["ops_outside_delegates"]["aten.convolution"] == 1
    assert record["runtimes"]["audiodeploy"]["ops_outside_delegates"] == {}
    assert record["transport"]["kind"] == device and record["transport"]["emulated"] == (device == "qemu-aarch64")
    assert record["target"]["shape"] == {"channels": 32, "kernel": 8, "groups": 4, "length": 20, "padding": 4}
    (case,) = record["cases"]
    assert case["input_shape"] == [1, 32, 20]
    for name, figures in case["runtimes"].items():
        assert figures["max_abs_diff_vs_eager"] < ATOL, name
        assert figures["peak_rss_bytes"] > 0, name  # the runner's own report: it ran there


@pytest.mark.parametrize(
    "args, words",
    [
        (("wav2vec2", "--channels", "32"), ("--channels, --kernel, --groups and --length", "pos-conv target only")),
        (("pos-conv", "--channels", "30", "--groups", "4"), ("--channels 30 is not divisible by --groups 4",)),
        (("pos-conv", "--kernel", "0"), ("--kernel 0", "at least 1")),
        (("pos-conv", "--compare", "eager", "--seconds", "2"), ("--compare, --seconds: not for pos-conv", "--length")),
    ],
    ids=["size-for-a-recipe", "groups-do-not-divide", "empty-kernel", "recipe-options"],
)
def test_pos_conv_options_are_checked_before_anything_is_built(
    tmp_path: Path, args: tuple[str, ...], words: tuple[str, ...]
):
    result = audiodeploy("bench", *args, "--json", str(tmp_path / "r.json"))
    assert_clean_error(result, *words)  # the error line alone: no progress line, so nothing was lowered
    assert not (tmp_path / "r.json").exists()
