"""Padding computed from 0-d integer tensors (a codec's strides and kernel sizes) follows a dynamic length in lower()."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import audiodeploy
from audiodeploy.lowering.integer_constants import (
    ExactScalar,
    MutatedIntegerConstantError,
    export_with_exact_integer_constants,
    integer_scalar_constants,
)
from tests.pipeline import assert_matches_eager


class PaddedConv(torch.nn.Module):
    """A strided convolution that pads its input to whole frames, its sizes kept as 0-d int64 tensors: EnCodec's
    ``EncodecConv1d`` (buffers) and Mimi's (its left and right padding plain tensor attributes), in a few lines."""

    def __init__(self, channels_in: int, channels_out: int, kernel: int, stride: int, pad_mode: str) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(channels_in, channels_out, kernel, stride)
        self.register_buffer("stride", torch.tensor(stride), persistent=False)
        self.register_buffer("kernel_size", torch.tensor(kernel), persistent=False)
        self.register_buffer("padding_total", torch.tensor(kernel - stride), persistent=False)
        self.padding_right = self.padding_total // 2
        self.padding_left = self.padding_total - self.padding_right
        self.pad_mode = pad_mode

    def extra_padding(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        n_frames = (length - self.kernel_size + self.padding_total) / self.stride + 1
        n_frames = torch.ceil(n_frames).to(torch.int64) - 1
        return n_frames * self.stride + self.kernel_size - self.padding_total - length

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left, right = self.padding_left, self.padding_right + self.extra_padding(x)
        if self.pad_mode == "reflect" and x.shape[-1] <= max(left, right):  # EnCodec's _pad1d, for short inputs
            x = F.pad(x, (0, max(left, right) - x.shape[-1] + 1))
        return self.conv(F.pad(x, (left, right), self.pad_mode))


class Codec(torch.nn.Module):
    """Two padded strided convolutions, hop 8, with an ELU between them, as a codec's encoder starts."""

    def __init__(self, pad_mode: str = "constant") -> None:
        super().__init__()
        self.first = PaddedConv(1, 4, kernel=4, stride=2, pad_mode=pad_mode)
        self.second = PaddedConv(4, 8, kernel=7, stride=4, pad_mode=pad_mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x)))


HOP = 8


def test_stock_export_cannot_follow_a_length_through_integer_tensors():
    """Why the module exists: stock torch.export reads the padding with .item(), an unbacked size, and stops."""
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(Codec("reflect"), (torch.randn(1, 1, 40 * HOP),), dynamic_shapes=({2: Dim("t", max=4096)},))


def test_padding_from_integer_tensors_is_exact_at_every_length():
    """Exported at a length of any size, the padded lengths are exact: the program matches eager at lengths that
    need each amount of extra padding, as each layer's ceil gives it, and the length itself stays a symbol.

    Zero padding (Mimi's): with reflect padding, EnCodec's ``max(left, right)`` branches on the extra padding, which
    the export then fixes to the example's remainder, as it would for any branch on a size."""
    torch.manual_seed(0)
    codec = Codec("constant").eval()
    length = Dim("length", min=16, max=4096)
    program = export_with_exact_integer_constants(codec, (torch.randn(1, 1, 333),), ({2: length},))
    (output,) = [node for node in program.graph.nodes if node.op == "output"]
    assert not output.args[0][0].meta["val"].shape[-1].node.expr.is_number  # still a function of the length
    for samples in (16, 17, 18, 19, 95, 333, 1000, 4093):
        x = torch.randn(1, 1, samples)
        torch.testing.assert_close(program.module()(x), codec(x), rtol=0, atol=0)


def test_a_codec_padded_from_integer_tensors_lowers_in_one_delegate_at_a_dynamic_length():
    """In multiples of its hop (as a codec's runtime feeds it), every padding is a constant of the length: XNNPACK
    takes the whole program."""
    torch.manual_seed(0)
    codec = Codec("reflect").eval()
    frames = Dim("frames", min=4, max=512)
    lowered = audiodeploy.lower(codec, (torch.randn(1, 1, 50 * HOP),), dynamic_shapes=({2: frames * HOP},))
    report = lowered.report.methods["forward"]
    assert (report.delegates, report.ops_outside_delegates) == (1, {}), report
    for count in (4, 37, 512):
        assert_matches_eager(lowered, codec, (torch.randn(1, 1, count * HOP),))


def test_the_module_is_given_back_as_it_was():
    codec = Codec()
    before = {key: (type(value), value.dtype) for key, value in integer_scalar_constants(codec).items()}
    buffers = [name for name, _ in codec.named_buffers()]
    export_with_exact_integer_constants(codec, (torch.randn(1, 1, 64),), ({2: Dim("t", min=16, max=999)},))
    assert {key: (type(value), value.dtype) for key, value in integer_scalar_constants(codec).items()} == before
    assert [name for name, _ in codec.named_buffers()] == buffers
    assert isinstance(codec.first.padding_right, torch.Tensor) and "padding_right" not in codec.first._buffers

    class Fails(Codec):
        def forward(self, x):
            raise RuntimeError("a failing forward")

    failing = Fails()
    with pytest.raises(RuntimeError, match="a failing forward"):
        export_with_exact_integer_constants(failing, (torch.randn(1, 1, 64),), None)
    assert [name for name, _ in failing.named_buffers()] == buffers
    assert all(isinstance(value, torch.Tensor) for value in integer_scalar_constants(failing).values())


class Counter(torch.nn.Module):
    """A 0-d integer buffer the forward counts with: state, not a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.tensor(0))
        self.register_buffer("offset", torch.tensor(3))

    def forward(self, x):
        self.calls.add_(1)
        return F.pad(x, (self.offset, 0)) * self.calls


def test_an_integer_tensor_the_forward_modifies_stays_a_tensor():
    exported = export_with_exact_integer_constants(Counter(), (torch.randn(1, 2, 10),), ({2: Dim("t", max=99)},))
    program = exported.run_decompositions({})  # as lower() does: the count becomes the program's buffer mutation
    assert list(program.graph_signature.buffers_to_mutate.values()) == ["calls"]
    x = torch.randn(1, 2, 21)
    torch.testing.assert_close(program.module()(x), Counter()(x))


def test_in_place_arithmetic_on_an_exact_scalar_names_the_constant():
    scalar = ExactScalar(3, name="encoder.stride", path=("encoder", "stride"))
    with pytest.raises(MutatedIntegerConstantError, match=r"encoder\.stride is modified in place \(add_\)") as raised:
        scalar.add_(1)
    assert raised.value.constant == ("encoder", "stride")


def test_exact_scalar_arithmetic_rounds_as_the_tensor_would():
    seven, two = ExactScalar(7), ExactScalar(2)
    assert (seven / two).python_value() == 3.5 and (seven // two).python_value() == 3
    assert torch.ceil(seven / two).to(torch.int64).python_value() == 4
    assert (-seven / two).to(torch.int64).python_value() == -3  # toward zero, as a cast does
    assert (seven % two).python_value() == 1 and max(seven, two) is seven and int(seven - 10) == -3
    assert torch.ceil(ExactScalar(1) / 3 * 3).python_value() == 1  # exact: 1/3 * 3 is 1, not 1.0000001
