"""The public API: lower() arguments, atomic save, and the report."""

import json
import os

import pytest
import torch
from torch.nn.utils.parametrizations import weight_norm

import audiodeploy
from audiodeploy._api import run_on_runtime
from audiodeploy.lowering import LoweringOptions, LoweringReport, Quantization, QuantizationScheme
from audiodeploy.lowering import lower as lower_core


def weight_norm_conv():
    torch.manual_seed(0)
    return weight_norm(torch.nn.Conv1d(8, 8, 4, padding=2, groups=2), dim=2).eval()


def test_report_serializes_to_json_and_back():
    lowered = audiodeploy.lower(weight_norm_conv(), (torch.randn(1, 8, 20),))
    data = json.loads(lowered.report.to_json())
    assert LoweringReport.from_dict(data) == lowered.report
    (fold,) = data["methods"]["forward"]["folds"]
    assert fold["gemm"] == "conv1d @ (top-level module)"
    assert sorted(fold["sources"]) == ["parametrizations.weight.original0", "parametrizations.weight.original1"]
    assert fold["bytes_freed"] > fold["bytes_written"] > 0


def test_report_says_why_stock_lowering_is_slow():
    lowered = audiodeploy.lower(weight_norm_conv(), (torch.randn(1, 8, 20),), options=LoweringOptions(fold=False))
    text = str(lowered.report)
    assert "stock ExecuTorch" in text
    assert "GEMM not delegated: convolution @ (top-level module): Expected weight to be a static param" in text
    assert "aten.convolution x1" in text


def test_report_lists_folds_readably():
    text = str(audiodeploy.lower(weight_norm_conv(), (torch.randn(1, 8, 20),)).report)
    assert "1 XNNPACK delegate(s); ops outside delegates: none" in text
    assert "folded 1 computed weight(s)" in text


def test_save_is_atomic_and_leaves_nothing_on_failure(tmp_path):
    lowered = audiodeploy.lower(torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),))
    target = tmp_path / "model.pte"
    lowered.save(target)
    assert target.read_bytes() == lowered.buffer
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    os.chmod(readonly, 0o500)
    try:
        if os.access(readonly, os.W_OK):
            pytest.skip("running as a user that can write anywhere")
        with pytest.raises(PermissionError):
            lowered.save(readonly / "model.pte")
        assert list(readonly.iterdir()) == []
    finally:
        os.chmod(readonly, 0o700)


def test_save_over_a_directory_fails_and_leaves_no_temporary_file(tmp_path):
    lowered = audiodeploy.lower(torch.nn.Linear(4, 4).eval(), (torch.randn(1, 4),))
    (tmp_path / "model.pte").mkdir()
    with pytest.raises(OSError):
        lowered.save(tmp_path / "model.pte")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte"]


def test_several_methods_need_method_objects():
    with pytest.raises(TypeError, match="audiodeploy.Method"):
        audiodeploy.lower({"forward": torch.nn.Linear(2, 2)})
    with pytest.raises(TypeError, match="example_inputs is required"):
        audiodeploy.lower(torch.nn.Linear(2, 2))


def test_the_report_says_what_each_rewrite_left_as_it_was_and_why():
    torch.manual_seed(0)
    lowered = audiodeploy.lower(torch.nn.Conv1d(2, 4, 3).eval(), (torch.randn(1, 2, 16),))
    skipped = lowered.report.methods["forward"].skipped_rewrites
    strided = [s for s in skipped if s.rewrite == "StridedConvAsGemmPass"]
    assert len(strided) == 1 and strided[0].reason.startswith("stride 1") and len(strided[0].nodes) == 1
    assert "left by StridedConvAsGemmPass" in lowered.report.describe(verbose=True)
    assert "left by" not in lowered.report.describe()  # only -v lists them
    assert LoweringReport.from_dict(json.loads(lowered.report.to_json())) == lowered.report


def test_options_rewrite_as_fold_unless_given():
    assert LoweringOptions().rewrite is True and LoweringOptions(fold=False).rewrite is False
    assert LoweringOptions(fold=False, rewrite=True).rewrite is True
    assert LoweringOptions(rewrite=False).fold is True


def test_options_take_a_quantization_not_a_scheme_name():
    with pytest.raises(
        TypeError, match=r"^quantization takes a Quantization, e.g. Quantization\('int8-dynamic'\), not str$"
    ):
        LoweringOptions(quantization="int8-dynamic")


def test_the_core_refuses_to_quantize_without_a_runner_before_exporting():
    int8 = LoweringOptions(quantization=Quantization(QuantizationScheme.INT8_DYNAMIC))
    with pytest.raises(TypeError, match="give run_program="):
        lower_core(torch.nn.Linear(4, 4).eval(), None, options=int8)  # no example inputs: refused first


def test_int8_fidelity_is_measured_through_the_runner_given():
    calls = []

    def runner(program, data, method, inputs):
        calls.append((type(program), data, method, len(inputs)))
        return run_on_runtime(program, data, method, inputs)

    int8 = LoweringOptions(quantization=Quantization(QuantizationScheme.INT8_DYNAMIC))
    lowered = audiodeploy.lower(torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),), options=int8, run_program=runner)
    assert calls == [(bytes, None, "forward", 2)]
    assert lowered.report.quantization.methods["forward"].fidelity["snr_db"] > 20
