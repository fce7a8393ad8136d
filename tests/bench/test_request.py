"""What `audiodeploy bench` is asked for, checked before anything is built, and without torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from audiodeploy.bench import BenchError, BenchRequest, check, parse_compare


def test_compare_names_are_checked_and_put_in_order():
    assert parse_compare("onnxruntime, stock") == ("stock", "onnxruntime")
    assert parse_compare("audiodeploy-int8,audiodeploy-fp16") == ("audiodeploy-fp16", "audiodeploy-int8")
    assert parse_compare(None) == ()
    with pytest.raises(BenchError, match="--compare tflite: choose among stock, eager, onnxruntime"):
        parse_compare("stock,tflite")


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (BenchRequest("wav2vec2", runs=0), "--runs and --stock-runs must be at least 1"),
        (BenchRequest("wav2vec2", threads=0), "--threads must be at least 1"),
        (BenchRequest("wav2vec2", seconds=(-1.0,)), "--seconds takes positive durations"),
        (BenchRequest("wav2vec2", device="ssh:board", compare=("onnxruntime",)), "drop onnxruntime from --compare"),
        (BenchRequest("wav2vec2", device="qemu-aarch64", compare=("eager",)), "drop eager from --compare"),
        (BenchRequest("wav2vec2", device="ssh:-oProxyCommand=x"), "give ssh:\\[USER@\\]HOST"),
        (BenchRequest("wav2vec2", device="adb", runner="r", compare=("eager",)), "drop eager from --compare"),
        (BenchRequest("wav2vec2", runner="r"), "--runner is for --device adb"),
        (BenchRequest("missing.pte"), "missing.pte: no such file"),
        (BenchRequest("wav2vec2", device="native", profile=True), "--profile reads ExecuTorch's event trace"),
        (BenchRequest("pos-conv", profile=True), "--profile is for a recipe or a .pte"),
        (BenchRequest("wav2vec2", seconds=(1.0, 3.0), max_seconds=2.0), "--seconds 3: outside the program's 1-2 s"),
        (BenchRequest("wav2vec2", min_seconds=3.0, max_seconds=2.0), "--min-seconds 3 --max-seconds 2 make no range"),
        (BenchRequest("pos-conv", min_seconds=1.0), "--min-seconds and --max-seconds set the length range of a recipe"),
        (BenchRequest("dac", method="forward"), "dac's program has an encode and a decode method; give one of them"),
        (BenchRequest("wav2vec2", method="decode"), "wav2vec2's program has one method, forward; leave --method out"),
        (BenchRequest("vits", method="encode"), "vits's encode takes token ids, whose count is no length in seconds"),
        (BenchRequest("pos-conv", method="decode"), "--method picks the method of a recipe's program"),
    ],
)
def test_mistakes_are_found_before_anything_is_built(request_, message):
    with pytest.raises(BenchError, match=message) as error:
        check(request_)
    assert "\n" not in str(error.value)


def test_compare_needs_a_recipe_target(linear_pte):
    with pytest.raises(BenchError, match="--compare needs a recipe target"):
        check(BenchRequest(str(linear_pte), compare=("eager",)))


def test_missing_onnxruntime_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now raises ImportError
    with pytest.raises(BenchError, match=r"needs onnxruntime, which is not installed: pip install -e '\.\[bench\]'"):
        check(BenchRequest("wav2vec2", compare=("onnxruntime",)))


def test_checking_a_request_imports_no_torch():
    """A mistake costs no import of torch or ExecuTorch (seconds): the check runs in a process that has neither."""
    script = (
        "import sys\n"
        "from audiodeploy.bench import BenchError, BenchRequest, check\n"
        "from audiodeploy.bench.plot import require_matplotlib\n"
        "check(BenchRequest('wav2vec2', variant='tiny', seconds=(1.0, 2.0), compare=('stock', 'eager')))\n"
        "try:\n"
        "    check(BenchRequest('wav2vec2', method='decode'))\n"
        "except BenchError as error:\n"
        "    print(error)\n"
        "print(sorted(name for name in ('torch', 'executorch') if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == [
        "--method decode: wav2vec2's program has one method, forward; leave --method out",
        "[]",
    ]
