"""ONNX Runtime's export: over protobuf's 2 GiB, the larger initializers become external data given from memory;
a codec's padding computed from integer tensors follows a dynamic length.

A model that large does not belong in CI, so the limit is lowered to a few KiB on a small convolutional model;
the layout (external-data fields, 64-byte aligned offsets in one in-memory file) is the same at any size.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from audiodeploy.bench import BenchError
from audiodeploy.bench.runtimes import (
    EXTERNAL_WEIGHTS,
    OnnxExport,
    OnnxRuntime,
    export_onnx,
    serialize_with_external_weights,
)
from tests.lowering.test_integer_constants import HOP, Codec


class ConvolutionThenProjection(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 32, 10, stride=5)
        self.projection = torch.nn.Linear(32, 48)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return self.projection(self.conv(audio.unsqueeze(1)).transpose(1, 2))


@pytest.fixture(scope="module")
def model_and_export() -> tuple[torch.nn.Module, tuple[torch.Tensor], object, OnnxExport]:
    torch.manual_seed(0)
    module = ConvolutionThenProjection().eval()
    example = (torch.randn(1, 800),)
    dynamic = ({1: torch.export.Dim("samples", min=100, max=16000)},)
    return module, example, dynamic, export_onnx(module, example, dynamic)


def test_a_model_within_the_limit_is_one_protobuf(model_and_export):
    *_, exported = model_and_export
    assert exported.weights == b""


def test_a_model_over_the_limit_reads_its_weights_from_memory_and_matches_eager(model_and_export):
    import onnx

    module, example, dynamic, exported = model_and_export
    proto = onnx.load_from_string(exported.model)
    model, weights = serialize_with_external_weights(proto, limit=len(exported.model) // 2)

    external = {
        tensor.name: {entry.key: entry.value for entry in tensor.external_data}
        for tensor in onnx.load_from_string(model).graph.initializer
        if tensor.data_location == onnx.TensorProto.EXTERNAL
    }
    assert len(external) >= 2  # the convolution's and the projection's weights
    assert all(int(place["offset"]) % 64 == 0 and place["location"] == EXTERNAL_WEIGHTS for place in external.values())
    assert len(model) + len(weights) >= len(exported.model)

    runtime = OnnxRuntime(
        module, example, dynamic, 1, exported=dataclasses.replace(exported, model=model, weights=weights)
    )
    assert runtime.info.program_bytes == len(model) + len(weights)
    runtime.load()
    audio = torch.randn(1, 4000)  # another length than the example's: the axis stays dynamic
    with torch.no_grad():
        expected = module(audio)
    torch.testing.assert_close(runtime.run([audio]), expected, rtol=1e-5, atol=1e-5)


def test_int8_of_a_model_over_the_limit_is_refused_with_its_remedy(model_and_export):
    import onnx

    module, example, dynamic, exported = model_and_export
    model, weights = serialize_with_external_weights(onnx.load_from_string(exported.model), limit=1024)
    with pytest.raises(BenchError, match="leave onnxruntime-int8 out of --compare"):
        OnnxRuntime(
            module, example, dynamic, 1, int8=True, exported=dataclasses.replace(exported, model=model, weights=weights)
        )


def test_a_codec_padded_from_integer_tensors_runs_in_onnx_runtime_at_every_length():
    """torch.onnx's own torch.export stops at the padding EnCodec and Mimi compute from 0-d integer tensors; the
    export is given the program audiodeploy exports instead, whose sizes follow the length, so ONNX Runtime has
    a baseline for such codecs at every multiple of the hop (what a codec's runtime feeds), not only the example's.
    """
    torch.manual_seed(0)
    codec = Codec("constant").eval()
    dynamic = ({2: torch.export.Dim("frames", min=4, max=512) * HOP},)
    runtime = OnnxRuntime(codec, (torch.randn(1, 1, 50 * HOP),), dynamic, 1)
    assert any("0-d integer tensors" in note for note in runtime.info.notes), runtime.info.notes
    runtime.load()
    for samples in (4 * HOP, 37 * HOP, 512 * HOP):
        audio = torch.randn(1, 1, samples)
        with torch.no_grad():
            expected = codec(audio)
        torch.testing.assert_close(runtime.run([audio]), expected, rtol=1e-5, atol=1e-5)
