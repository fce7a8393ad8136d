"""int8: fold, quantize, lower to one XNNPACK delegate, run with ExecuTorch, compare with fp32 eager.

Bars (this machine, AVX-512 VNNI; tiny models with seeded synthetic weights):
- a weight_norm Conv1d + Linear: output SNR >= 30 dB (int8-dynamic), >= 25 dB (int8-static);
- tiny wav2vec2 int8-dynamic: one delegate, nothing outside, frame argmax agreement >= 90% and
  SNR >= 25 dB at the shortest and at three times the example length (measured: 97.6%, 31.7 dB).
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch.export import Dim
from torch.nn.utils.parametrizations import weight_norm

import audiodeploy
from audiodeploy.lowering import LoweringOptions, LoweringReport
from audiodeploy.lowering.passes.fold_computed_gemm_weights import apply_folds, plan_folds
from audiodeploy.lowering.quantize import (
    CALIBRATION_STAGE,
    SENSITIVITY_STAGE,
    KeepFp32PatternError,
    Quantization,
    QuantizationError,
    QuantizationScheme,
    is_selection_weight,
    quantize_program,
)
from audiodeploy.program import fidelity
from tests.pipeline import export_aten, int8_dynamic_tiny_wav2vec2, run_lowered

DYNAMIC_SNR_DB = 30.0
STATIC_SNR_DB = 25.0
DYNAMIC = QuantizationScheme.INT8_DYNAMIC
STATIC = QuantizationScheme.INT8_STATIC


class ConvThenLinear(torch.nn.Module):
    """weight_norm Conv1d -> GELU -> weight_norm Linear over frames: [1, 4, T] -> [1, T, 8]."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = weight_norm(torch.nn.Conv1d(4, 16, 9, padding=4))
        self.lin = weight_norm(torch.nn.Linear(16, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.nn.functional.gelu(self.conv(x)).transpose(1, 2))


def conv_then_linear() -> ConvThenLinear:
    torch.manual_seed(0)
    return ConvThenLinear().eval()


LENGTH = Dim("length", min=16, max=4000)
EXAMPLE = (torch.randn(1, 4, 200, generator=torch.Generator().manual_seed(1)),)


def signals(*lengths: int) -> list[tuple[torch.Tensor]]:
    return [(torch.randn(1, 4, n, generator=torch.Generator().manual_seed(n)),) for n in lengths]


def snr_against_eager(lowered, module, cases) -> float:
    with torch.no_grad():
        references = [module(*case) for case in cases]
    return fidelity.measure(references, [run_lowered(lowered, case) for case in cases])["snr_db"]


def test_int8_dynamic_weight_norm_linear_is_a_delegated_int8_gemm_and_runs_at_two_lengths():
    module = conv_then_linear()
    lowered = audiodeploy.lower(
        module, EXAMPLE, dynamic_shapes=({2: LENGTH},), options=LoweringOptions(quantization=Quantization(DYNAMIC))
    )
    method = lowered.report.methods["forward"]
    assert (method.delegates, method.ops_outside_delegates) == (1, {}), str(lowered.report)
    assert len(method.folds) == 2  # both weight_norm weights folded before quantization
    quantized = lowered.report.quantization.methods["forward"]
    # XNNPACK 1.5.1 runs dynamically quantized 2-D convolutions only: the Conv1d is quantized as the 2-D
    # convolution of one row that XNNPACK runs it as anyway.
    assert quantized.quantized_gemms == ("conv2d @ conv", "linear @ lin")
    assert quantized.fp32_gemms == ()
    assert quantized.fidelity["snr_db"] >= DYNAMIC_SNR_DB
    assert snr_against_eager(lowered, module, signals(16, 3000)) >= DYNAMIC_SNR_DB


def test_int8_static_weight_norm_conv1d_and_linear_are_delegated_int8_gemms():
    module = conv_then_linear()
    calibration = signals(200, 300, 400)
    lowered = audiodeploy.lower(
        module,
        EXAMPLE,
        dynamic_shapes=({2: LENGTH},),
        options=LoweringOptions(quantization=Quantization(STATIC, calibration=calibration)),
    )
    method = lowered.report.methods["forward"]
    assert (method.delegates, method.ops_outside_delegates) == (1, {}), str(lowered.report)
    quantization = lowered.report.quantization
    assert quantization.calibration == "3 given inputs"
    assert set(quantization.methods["forward"].quantized_gemms) == {"conv1d @ conv", "linear @ lin"}
    assert snr_against_eager(lowered, module, signals(50, 1000)) >= STATIC_SNR_DB


def test_int8_scales_are_per_channel_and_come_from_the_folded_weight():
    module = conv_then_linear()
    ep = export_aten(module, EXAMPLE)
    folded, _ = apply_folds(ep, plan_folds(ep).candidates)
    program = quantize_program(folded, DYNAMIC).program
    (linear,) = [n for n in program.graph.nodes if n.target == torch.ops.aten.linear.default]
    dequantize = linear.args[1]
    assert dequantize.target == torch.ops.quantized_decomposed.dequantize_per_channel.default
    scale_node = dequantize.args[1]
    signature = program.graph_signature
    target = {**signature.inputs_to_buffers, **signature.inputs_to_lifted_tensor_constants}[scale_node.name]
    scale = program.constants.get(target, program.state_dict.get(target))
    with torch.no_grad():
        weight = module.lin.weight  # what weight_norm computes: the folded constant
    torch.testing.assert_close(scale, weight.abs().amax(dim=1) / 127, rtol=1e-5, atol=1e-8)


def test_int8_keep_fp32_leaves_the_named_linear_in_fp32_inside_the_delegate():
    int8 = Quantization(STATIC, keep_fp32=["lin"], calibration=signals(200))
    lowered = audiodeploy.lower(conv_then_linear(), EXAMPLE, options=LoweringOptions(quantization=int8))
    method = lowered.report.methods["forward"]
    assert (method.delegates, method.ops_outside_delegates) == (1, {})
    quantized = lowered.report.quantization.methods["forward"]
    assert quantized.quantized_gemms == ("conv1d @ conv",)
    assert [(g.gemm, g.reason) for g in quantized.fp32_gemms] == [("linear @ lin", "kept fp32 by pattern 'lin'")]
    assert lowered.report.quantization.keep_fp32 == ("lin",)
    assert "kept fp32: lin" in str(lowered.report)


def test_int8_unknown_scheme_is_a_one_line_value_error_naming_the_choices():
    with pytest.raises(ValueError) as error:
        Quantization("int4")
    assert isinstance(error.value, QuantizationError)
    message = str(error.value)
    assert "\n" not in message and "'int4'" in message and "int8-dynamic, int8-static" in message


def test_int8_scheme_names_are_the_command_lines_and_convert_to_the_enum():
    assert [scheme.value for scheme in QuantizationScheme] == ["int8-dynamic", "int8-static"]
    assert Quantization("int8-dynamic").scheme is DYNAMIC
    assert QuantizationScheme("int8-static") is STATIC
    assert json.dumps({"scheme": STATIC}) == '{"scheme": "int8-static"}' and f"{STATIC}" == "int8-static"


def test_int8_dynamic_with_calibration_is_refused():
    with pytest.raises(QuantizationError) as error:
        Quantization(DYNAMIC, calibration=signals(200))
    assert str(error.value).startswith("calibration is for int8-static: int8-dynamic quantizes activations at run time")


def test_int8_empty_calibration_is_refused():
    with pytest.raises(QuantizationError, match="^calibration is empty: give at least one input tuple, or None$"):
        Quantization(STATIC, calibration=[])
    with pytest.raises(QuantizationError, match="^calibration of method 'decode' is empty"):
        Quantization(STATIC, calibration={"encode": signals(200), "decode": []})


def test_int8_empty_fidelity_inputs_are_refused():
    with pytest.raises(QuantizationError, match="^fidelity_inputs is empty: give at least one input tuple, or None$"):
        Quantization(DYNAMIC, fidelity_inputs=())


def test_int8_keep_fp32_is_a_sequence_of_pattern_strings_kept_as_a_tuple():
    with pytest.raises(
        TypeError, match=r"^keep_fp32 takes a sequence of patterns, not one string: keep_fp32=\['lin'\]$"
    ):
        Quantization(DYNAMIC, keep_fp32="lin")
    with pytest.raises(TypeError, match="^keep_fp32 takes fnmatch patterns \\(strings\\), not int: 3$"):
        Quantization(DYNAMIC, keep_fp32=["lin", 3])
    assert Quantization(DYNAMIC, keep_fp32=["lin"]).keep_fp32 == ("lin",)


def test_int8_static_without_calibration_warns_once_and_records_generated_signals():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        int8 = Quantization(STATIC)
        lowered = audiodeploy.lower(
            torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),), options=LoweringOptions(quantization=int8)
        )
    ours = [w for w in caught if "calibration" in str(w.message)]
    assert len(ours) == 1 and "\n" not in str(ours[0].message) and ours[0].filename == __file__
    assert lowered.report.quantization.calibration == "4 generated signals"


def test_int8_report_round_trips_and_old_reports_still_load():
    lowered = audiodeploy.lower(
        conv_then_linear(), EXAMPLE, options=LoweringOptions(quantization=Quantization(DYNAMIC))
    )
    data = json.loads(lowered.report.to_json())
    assert data["quantization"]["scheme"] == "int8-dynamic"
    assert LoweringReport.from_dict(data) == lowered.report
    del data["quantization"]
    assert LoweringReport.from_dict(data).quantization is None


class TwoLinears(torch.nn.Module):
    """``b`` reads one input feature through weights 100x the others: its per-channel int8 steps are coarse."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 8)
        with torch.no_grad():
            self.b.weight[:, 0] *= 100

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def test_int8_sensitivity_ranks_each_gemm_alone_and_the_report_keeps_and_shows_it():
    int8 = Quantization(DYNAMIC, keep_fp32=["a"], sensitivity=True)
    lowered = audiodeploy.lower(TwoLinears().eval(), (torch.randn(4, 16),), options=LoweringOptions(quantization=int8))
    ranked = lowered.report.quantization.methods["forward"].sensitivity
    # Every GEMM is measured, the kept one too: the ranking is what a user chooses keep_fp32 from.
    assert [g.gemm for g in ranked] == ["linear @ b", "linear @ a"]
    assert ranked[0].snr_db + 10 < ranked[1].snr_db, ranked
    assert LoweringReport.from_dict(json.loads(lowered.report.to_json())) == lowered.report
    described = str(lowered.report)
    assert "most sensitive" in described and f"{ranked[0].snr_db:6.1f} dB  linear @ b" in described


def test_int8_keep_fp32_pattern_that_matches_no_gemm_is_refused_before_sensitivity_naming_gemms():
    heard: list[str] = []
    with pytest.raises(KeepFp32PatternError) as caught:
        int8 = Quantization(DYNAMIC, keep_fp32=["a", "[abc"], sensitivity=True)
        audiodeploy.lower(
            TwoLinears().eval(),
            (torch.randn(4, 16),),
            options=LoweringOptions(quantization=int8),
            progress=heard.append,
        )
    message = str(caught.value)
    assert "\n" not in message and "'[abc'" in message and "module path (a, b);" in message, message
    assert heard == []  # refused before the GEMMs were measured


def test_int8_progress_hears_each_sensitivity_gemm_and_each_calibration_input():
    heard: list[str] = []
    int8 = Quantization(STATIC, sensitivity=True, calibration=[(torch.randn(4, 16),) for _ in range(3)])
    audiodeploy.lower(
        TwoLinears().eval(), (torch.randn(4, 16),), options=LoweringOptions(quantization=int8), progress=heard.append
    )
    assert heard == [
        f"{SENSITIVITY_STAGE}: GEMM 1 of 2 (linear @ a)",
        f"{SENSITIVITY_STAGE}: GEMM 2 of 2 (linear @ b)",
        *(f"{CALIBRATION_STAGE}: input {i} of 3" for i in (1, 2, 3)),
    ]


def test_fidelity_floor_holds_snr_measures_only():
    assert fidelity.below_floor({"snr_db": 14.9, "max_abs_diff": 100.0}) == {"snr_db": 15.0}
    assert fidelity.below_floor({"snr_db": 15.0, "waveform_snr_db": float("inf")}) == {}
    assert fidelity.below_floor({"waveform_snr_db": float("nan")}) == {"waveform_snr_db": 15.0}


def test_fidelity_measures():
    reference = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    assert fidelity.output_snr_db(reference, reference) == float("inf")
    assert fidelity.output_snr_db(reference, reference * 1.1) == pytest.approx(20.0)
    assert fidelity.max_abs_diff(reference, reference + 0.25) == pytest.approx(0.25)
    assert fidelity.frame_argmax_agreement(reference, torch.tensor([[1.0, 0.0, 0.0], [3.0, 2.0, 0.0]])) == 0.5
    # waveforms of two lengths pool into one energy ratio
    pooled = fidelity.measure([torch.ones(1, 3), torch.ones(1, 5)], [torch.ones(1, 3), 1.1 * torch.ones(1, 5)])
    assert pooled["snr_db"] == pytest.approx(10 * torch.log10(torch.tensor(8 / (5 * 0.01))).item(), rel=1e-6)
    log_mel = fidelity.log_mel_distance(lambda waveform: waveform.abs().clamp(min=1e-5).log())
    assert log_mel(torch.ones(4), torch.full((4,), torch.e)) == pytest.approx(1.0)

    # waveforms of one length pool as rows: the front end takes each on its own, as a vocoder's refuses a batch
    def one_waveform(waveform: torch.Tensor) -> torch.Tensor:
        assert waveform.dim() == 1, waveform.shape
        return waveform.abs().clamp(min=1e-5).log()

    rows = fidelity.measure(
        [torch.ones(1, 4), torch.ones(1, 4)],
        [torch.full((1, 4), torch.e), torch.ones(1, 4)],
        {"log_mel": fidelity.log_mel_distance(one_waveform)},
    )
    assert rows["log_mel"] == pytest.approx(0.5)


def test_selection_weights_are_recognized():
    assert is_selection_weight(torch.eye(3).reshape(3, 3, 1))
    assert is_selection_weight(torch.full((1, 8), 1 / 8))
    assert not is_selection_weight(torch.tensor([[0.5, 0.25]]))
    assert not is_selection_weight(torch.zeros(2, 2))


def test_int8_dynamic_tiny_wav2vec2_is_one_delegate_and_agrees_with_fp32_argmax():
    built, lowered, held_out = int8_dynamic_tiny_wav2vec2()
    method = lowered.report.methods["forward"]
    assert (method.delegates, method.ops_outside_delegates) == (1, {}), str(lowered.report)
    quantized = lowered.report.quantization.methods["forward"]
    assert len(quantized.quantized_gemms) >= 18  # every linear and the feature encoder's GEMMs but the kept two
    assert [gemm.gemm.split(" @ ")[1] for gemm in quantized.fp32_gemms] == [
        "model.wav2vec2.feature_extractor.conv_layers.0.conv",
        "model.lm_head",
    ]
    assert quantized.fidelity["argmax"] >= 0.9 and quantized.fidelity["snr_db"] >= 25.0, quantized.fidelity
    # and through the runtime the CLI uses, at both ends of the range
    with torch.no_grad():
        references = [built.module(*case) for case in held_out]
    actuals = [run_lowered(lowered, case) for case in held_out]
    assert fidelity.measure(references, actuals, {"argmax": fidelity.frame_argmax_agreement})["argmax"] >= 0.9


class ConvBatchNormLinear(torch.nn.Module):
    """Every pattern kind the static quantizer knows: conv + batch norm + relu, conv_transpose, add, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)
        self.norm = torch.nn.BatchNorm2d(4)
        self.up = torch.nn.ConvTranspose2d(4, 4, 2, stride=2)
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = torch.relu(self.norm(self.conv(x)))
        return self.linear(self.up(y) + 1.0)


def test_the_post_training_quantizer_annotates_what_xnnpacks_does_without_tracing_training_patterns():
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    from audiodeploy.lowering.quantize import _post_training_quantizer

    def annotations(quantizer_class: type) -> dict[str, str]:
        module = torch.nn.Sequential(ConvBatchNormLinear()).eval()
        graph_module = export_aten(module, (torch.randn(1, 2, 6, 6),)).module()
        quantizer = quantizer_class().set_global(get_symmetric_quantization_config(is_per_channel=True))
        quantizer.annotate(graph_module)
        annotated = [n for n in graph_module.graph.nodes if "quantization_annotation" in n.meta]
        return {n.name: repr(n.meta["quantization_annotation"]) for n in annotated}

    stock = annotations(XNNPACKQuantizer)
    assert len(stock) >= 4  # the GEMMs, the batch norm's relu, the add
    assert annotations(_post_training_quantizer()) == stock
    assert not any(pattern.is_qat for pattern in _post_training_quantizer().SUPPORTED_PATTERNS)
