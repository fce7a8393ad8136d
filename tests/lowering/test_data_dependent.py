"""A size that depends on the input's values: one clear error from lower(), before any rewrite runs into it."""

from pathlib import Path

import pytest
import torch
from torch.export import Dim

import audiodeploy
from audiodeploy.errors import AudiodeployError
from audiodeploy.lowering import DataDependentShapeError, ExampleShapeError, FixedSizeError, LoweringOptions
from audiodeploy.runtime import Program


class RepeatByCounts(torch.nn.Module):
    """Each frame repeated by a count the caller gives: VITS's expansion by predicted durations."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, counts):
        frames = x.repeat_interleave(counts, dim=1)
        return self.linear(frames.transpose(1, 2).reshape(1, -1, 4))


class PadByCount(torch.nn.Module):
    """Padding by a count read from the input: export stops at the branch on it, not at an op of the graph."""

    def forward(self, x):
        count = (x > 0).sum()
        if count > 3:
            return x * 2.0
        return x


class LoopOverFrames(torch.nn.Module):
    """A recurrence written as a Python loop over the frames: its length is fixed by the trace."""

    def forward(self, x):
        state = x[..., 0]
        for frame in range(x.shape[-1]):
            state = torch.tanh(state + x[..., frame])
        return state


class PositiveIndices(torch.nn.Module):
    def forward(self, x):
        indices = torch.nonzero(x > 0)
        return indices.to(torch.float32).reshape(1, -1) * 2.0


def where(code: str) -> str:
    """``file:line (`code`)`` of the line of this file that holds ``code``, as the error names it."""
    lines = Path(__file__).read_text().splitlines()
    (number,) = [i + 1 for i, line in enumerate(lines) if line.strip() == code]
    return f"{Path(__file__).name}:{number} (`{code}`)"


# Stock lowering fails on it too (in edge lowering): the check comes before both.
@pytest.mark.parametrize("options", [LoweringOptions(), LoweringOptions(fold=False)], ids=["audiodeploy", "stock"])
def test_repeat_interleave_by_a_tensor_is_refused_before_any_rewrite(options):
    # Without the check, StaticReshapePass fails inside on "Could not guard on data-dependent expression".
    inputs = (torch.randn(1, 3, 4), torch.tensor([1, 2, 3]))
    with pytest.raises(DataDependentShapeError) as raised:
        audiodeploy.lower(RepeatByCounts().eval(), inputs, options=options)
    message = str(raised.value)
    assert message.startswith("forward: aten.repeat_interleave.self_Tensor at /"), message
    assert f"/{where('frames = x.repeat_interleave(counts, dim=1)')} makes a tensor of shape (1, u0, 4)" in message
    assert "split the model there" in message and "on the host" in message, message


def test_nonzero_is_refused_with_its_line_in_one_line_for_the_command_line():
    with pytest.raises(DataDependentShapeError) as raised:
        audiodeploy.lower(PositiveIndices().eval(), (torch.randn(8),))
    error = raised.value
    assert str(error).startswith("forward: aten.nonzero.default at /"), error
    assert f"/{where('indices = torch.nonzero(x > 0)')} makes a tensor of shape (u0, 1) where u0 depends" in str(error)
    # The command line prints an AudiodeployError's message as its one line, with its exit status.
    assert isinstance(error, AudiodeployError) and isinstance(error, ValueError)
    assert "\n" not in str(error) and error.exit_status == 2


def test_a_branch_on_the_input_values_is_refused_at_the_model_line_not_inside_export():
    with pytest.raises(DataDependentShapeError) as raised:
        audiodeploy.lower(PadByCount().eval(), (torch.randn(1, 4, 16),))
    message = str(raised.value)
    assert message.startswith("forward: the model branches at /"), message
    assert f"/{where('if count > 3:')} on a size that depends on the input's values" in message, message
    assert "\n" not in message and raised.value.exit_status == 2


def test_a_loop_over_a_dynamic_length_is_one_error_that_says_to_use_windows():
    with pytest.raises(FixedSizeError) as raised:
        audiodeploy.lower(
            LoopOverFrames().eval(), (torch.randn(1, 4, 16),), dynamic_shapes=({2: Dim("frames", max=64)},)
        )
    message = str(raised.value)
    assert message.startswith(
        "forward: the model fixes a size that dynamic_shapes leaves free (You marked frames as dynamic but your code "
        "specialized it to be a constant (16)); lower it"
    ), message
    assert "at a fixed length and run it in windows" in message and "\n" not in message, message


def test_an_example_input_not_of_the_form_of_its_dynamic_shapes_is_one_error_that_says_so():
    # torch's message is two lines, the second generic ("The error above occurred when calling torch.export.export").
    with pytest.raises(ExampleShapeError) as raised:
        audiodeploy.lower(
            torch.nn.Linear(8, 8).eval(), (torch.randn(1, 20, 8),), dynamic_shapes=({1: 8 * Dim("frames", max=64)},)
        )
    message = str(raised.value)
    assert message == (
        "forward: Expected shape[1] = 20 of the example input to be of the form 8*frames, where frames is an integer; "
        "give an example input of that form, or dynamic_shapes that its size fits"
    ), message
    assert isinstance(raised.value, ValueError) and raised.value.exit_status == 2


class PadBackToEvenOrOdd(torch.nn.Module):
    """Frames pooled in pairs and padded back with a slice of a zero row as long as the length is odd (0 or 1 rows):
    export takes the length as even, a guard that only its own module checks."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.register_buffer("zeros", torch.zeros(1, 1, 8))

    def forward(self, signal):
        x = self.linear(signal.view(1, -1, 8))
        n = x.shape[1]
        return torch.cat([x[:, : 2 * (n // 2)] * 2, self.zeros[:, : n - 2 * (n // 2)]], dim=1)


def test_a_guard_export_leaves_unchecked_is_refused_at_a_length_where_it_fails():
    # ExecuTorch 1.5.1 runs the program at 21 frames and returns 20: wrong, silently.
    frames = Dim("frames", min=4, max=40)
    with pytest.raises(FixedSizeError) as raised:
        audiodeploy.lower(PadBackToEvenOrOdd().eval(), (torch.randn(1, 160),), dynamic_shapes=({1: 8 * frames},))
    message = str(raised.value)
    assert message.startswith("forward: torch.export assumed `"), message
    assert "which is false for signal of size (1, 40)" in message and "\n" not in message, message
    # Over even lengths alone the guard holds: the program lowers.
    lowered = audiodeploy.lower(
        PadBackToEvenOrOdd().eval(), (torch.randn(1, 160),), dynamic_shapes=({1: 16 * Dim("pairs", min=2, max=20)},)
    )
    assert lowered.report.methods["forward"].delegates >= 1


class PadBackIfShorter(torch.nn.Module):
    """SEW's upsampling: frames pooled in pairs, repeated back and padded to the input's length `if` that is
    longer. Export takes the branch of an odd example (a guard: the length is odd); at an even length the program
    pads by 0 frames, where the model skips the pad: the same result."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, signal):
        x = self.linear(signal.view(1, -1, 8))
        pooled = torch.nn.functional.avg_pool1d(x.transpose(1, 2), 2).transpose(1, 2)
        upsampled = pooled.repeat_interleave(2, dim=1)
        if upsampled.shape[1] < x.shape[1]:
            upsampled = torch.nn.functional.pad(upsampled, (0, 0, 0, x.shape[1] - upsampled.shape[1]))
        return upsampled + x


def test_a_guard_that_fails_where_the_program_still_gives_the_models_result_is_kept(caplog):
    module = PadBackIfShorter().eval()
    with caplog.at_level("WARNING", logger="audiodeploy.lowering.pipeline"):
        lowered = audiodeploy.lower(
            module, (torch.randn(1, 8 * 21),), dynamic_shapes=({1: 8 * Dim("frames", min=4, max=40)},)
        )
    (warning,) = [r.getMessage() for r in caplog.records if "torch.export assumed" in r.getMessage()]
    # Checked at the first, a middle and the last even frame count (4, 22, 40 frames).
    assert warning.endswith(
        "the program gives the model's result there (checked at signal of size (1, 32); signal of size (1, 176); "
        "signal of size (1, 320)), so it is kept"
    ), warning
    program = Program(lowered.buffer)
    for frames in (4, 5, 20, 21, 40):
        signal = torch.randn(1, 8 * frames)
        with torch.no_grad():
            torch.testing.assert_close(program.run((signal,))[0], module(signal), rtol=1e-5, atol=1e-5)
