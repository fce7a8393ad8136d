"""LstmAsStepsPass: an LSTM of a fixed sequence length as GEMMs, static slices, activations and cats, one delegate.

At a fixed length only: torch.export fixes the length of a program with an LSTM (tests/lowering/test_recurrent.py).
"""

import pytest
import torch

from audiodeploy.lowering.passes.lstm_as_steps import LstmAsStepsPass
from tests.pipeline import assert_rewrites, export_aten, lower_stock_and_rewritten


class ConvLstmConv(torch.nn.Module):
    """EnCodec's LSTM block between two convolutions: frames through a two-layer LSTM, plus a residual."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.pre = torch.nn.Conv1d(4, channels, 3, padding=1)
        self.lstm = torch.nn.LSTM(channels, channels, num_layers=2)
        self.post = torch.nn.Conv1d(channels, 4, 3, padding=1)

    def forward(self, x):
        frames = self.pre(x).permute(2, 0, 1)
        y, _ = self.lstm(frames)
        return self.post((y + frames).permute(1, 2, 0))


def test_fp32_conv_lstm_conv_at_a_fixed_length_is_one_delegate():
    torch.manual_seed(0)
    stock, report = lower_stock_and_rewritten(ConvLstmConv().eval(), (torch.randn(1, 4, 6),), "LstmAsStepsPass")
    # Stock: each step's gate split, squeezes and the zero initial state stay outside and cut the delegates.
    assert stock.delegates > 3 and stock.ops_outside_delegates.get("aten.split_with_sizes_copy", 0) > 0, stock


class Lstm(torch.nn.Module):
    """An LSTM and all three of its results; called with the initial state when one is given."""

    def __init__(self, **options) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 5, **options)

    def forward(self, x, *state):
        y, (h, c) = self.lstm(x, state or None)
        return y, h, c


@pytest.mark.parametrize(
    ("options", "given_state"),
    [
        ({"num_layers": 2}, False),
        ({"num_layers": 2}, True),
        ({"num_layers": 2, "bidirectional": True, "batch_first": True}, True),
        ({"bias": False, "batch_first": True}, False),
    ],
    ids=["two-layers", "two-layers-given-state", "bidirectional-batch-first-given-state", "no-bias-batch-first"],
)
def test_fp32_every_lstm_form_is_steps_with_one_gemm_of_the_inputs_per_layer(options, given_state):
    torch.manual_seed(0)
    module = Lstm(**options).eval()
    layers, directions, steps = options.get("num_layers", 1), 2 if options.get("bidirectional") else 1, 4
    x = torch.randn(3, steps, 6) if options.get("batch_first") else torch.randn(steps, 3, 6)
    state = (torch.randn(layers * directions, 3, 5), torch.randn(layers * directions, 3, 5)) if given_state else ()
    # Per layer and direction: the GEMM of all inputs, and one of the hidden state per step but the first from zeros.
    hidden_gemms = steps if given_state else steps - 1
    counts = {
        "aten.lstm.input": 0,
        "aten.linear.default": layers * directions * (1 + hidden_gemms),
        "aten.sigmoid.default": layers * directions * steps,  # of the four gates at once
        "aten.tanh.default": layers * directions * steps * 2,
        "aten.zeros.default": 0,
    }
    assert_rewrites(module, [(x, *state)], "LstmAsStepsPass", counts)


def test_leaves_an_lstm_with_projections_with_its_reason():
    ep = export_aten(Lstm(proj_size=2).eval(), (torch.randn(4, 1, 6),))
    rewrite = LstmAsStepsPass(ep)
    assert not rewrite(ep.graph_module).modified
    assert [reason for _, reason in rewrite.skipped] == ["it has projections (proj_size)"]
