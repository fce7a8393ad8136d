"""A recurrent layer over a dynamic length: one clear error from lower(), before any rewrite, that says to window."""

from pathlib import Path

import pytest
import torch
from torch.export import Dim

import audiodeploy
from audiodeploy.lowering import FixedSizeError, LoweringOptions, RecurrentLengthError


class ConvLstm(torch.nn.Module):
    """EnCodec's LSTM block in small: frames of a convolution through a two-layer LSTM, with a residual."""

    def __init__(self, gru: bool = False) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
        self.recurrent = (torch.nn.GRU if gru else torch.nn.LSTM)(8, 8, num_layers=2)

    def forward(self, x):
        frames = self.conv(x).permute(2, 0, 1)
        y, _ = self.recurrent(frames)
        return (y + frames).permute(1, 2, 0)


def where(code: str) -> str:
    """``file:line (`code`)`` of the line of this file that holds ``code``, as the error names it."""
    lines = Path(__file__).read_text().splitlines()
    (number,) = [i + 1 for i, line in enumerate(lines) if line.strip() == code]
    return f"{Path(__file__).name}:{number} (`{code}`)"


@pytest.mark.parametrize("options", [LoweringOptions(), LoweringOptions(fold=False)], ids=["audiodeploy", "stock"])
def test_an_lstm_over_a_dynamic_length_is_refused_at_its_line_with_the_window_remedy(options):
    inputs = (torch.randn(1, 4, 12),)
    with pytest.raises(RecurrentLengthError) as raised:
        audiodeploy.lower(ConvLstm().eval(), inputs, dynamic_shapes=({2: Dim("frames", max=64)},), options=options)
    error = raised.value
    message = str(error)
    assert message.startswith("forward: aten.lstm.input at /"), message
    assert f"/{where('y, _ = self.recurrent(frames)')} runs a recurrent layer" in message, message
    assert "unrolls at the example's length (12 steps)" in message, message
    assert "lower it at a fixed window length" in message and "run the input in windows" in message, message
    # A kind of FixedSizeError, one line for the command line, raised from export's own constraint violation.
    assert isinstance(error, FixedSizeError) and "\n" not in message and error.exit_status == 2
    assert isinstance(error.__cause__, torch._dynamo.exc.UserError), error.__cause__


def test_a_gru_over_a_dynamic_length_is_the_same_error():
    with pytest.raises(RecurrentLengthError, match=r"^forward: aten\.gru\.input at /"):
        audiodeploy.lower(
            ConvLstm(gru=True).eval(), (torch.randn(1, 4, 12),), dynamic_shapes=({2: Dim("frames", max=64)},)
        )


class LstmOverChannels(torch.nn.Module):
    """An LSTM whose sequence is a fixed axis (4 channels) of a signal of dynamic length: nothing to refuse."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(1, 2, batch_first=True)

    def forward(self, x):
        y, _ = self.lstm(x.permute(0, 2, 1).reshape(-1, 4, 1))
        return y


def test_an_lstm_whose_sequence_is_not_the_dynamic_axis_exports_at_a_dynamic_length():
    inputs = (torch.randn(1, 4, 12),)
    program = torch.export.export(LstmOverChannels().eval(), inputs, dynamic_shapes=({2: Dim("frames", max=64)},))
    assert any(node.target is torch.ops.aten.lstm.input for node in program.graph.nodes)
