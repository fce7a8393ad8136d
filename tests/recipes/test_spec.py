"""Input specifications: valid lengths, padding, length ranges, dynamic shapes, serialization."""

from __future__ import annotations

import pytest
import torch

from audiodeploy.recipes import (
    InputLengthError,
    InputSpec,
    LengthRange,
    LengthRangeError,
    OutputSpec,
    mel_input,
    waveform_input,
)
from tests.recipes.helpers import assert_one_line


def test_waveform_lengths_are_multiples_of_the_stride_covering_the_range():
    spec = waveform_input(16_000, 320, LengthRange(1.0, 10.0))
    assert (spec.min_length, spec.max_length) == (16_000, 160_000)
    assert spec.length_multiple == 320
    assert spec.shape(16_000) == (1, 16_000)
    assert spec.seconds(32_000) == 2.0


def test_waveform_range_rounds_the_minimum_up_and_the_maximum_down():
    spec = waveform_input(16_000, 320, LengthRange(0.51, 2.99))
    assert (spec.min_length, spec.max_length) == (8_320, 47_680)


def test_padded_length_pads_to_the_next_multiple_and_up_to_the_minimum():
    spec = waveform_input(16_000, 320, LengthRange(1.0, 10.0))
    assert spec.padded_length(16_001) == 16_320
    assert spec.padded_length(16_000) == 16_000
    assert spec.padded_length(100) == 16_000
    assert spec.padded_length(160_000) == 160_000


def test_an_input_longer_than_the_range_is_a_one_line_error():
    spec = waveform_input(16_000, 320, LengthRange(1.0, 10.0))
    with pytest.raises(InputLengthError) as caught:
        spec.padded_length(160_001)
    assert_one_line(caught.value, "longer than the 10.00 s", "--max-seconds")


def test_mel_lengths_count_frames_of_one_hop():
    spec = mel_input(16_000, 256, 80, LengthRange(1.0, 10.0))
    assert (spec.min_length, spec.max_length) == (63, 625)
    assert spec.shape(63) == (1, 63, 80)
    assert spec.length_multiple == 1


@pytest.mark.parametrize(
    ("low", "high", "fragment"),
    [(0.0, 1.0, "positive"), (2.0, 1.0, "inverted"), (1.0, float("inf"), "finite")],
)
def test_invalid_length_ranges_are_refused(low, high, fragment):
    with pytest.raises(LengthRangeError) as caught:
        LengthRange(low, high)
    assert_one_line(caught.value, fragment)


def test_a_range_too_short_for_the_model_is_refused():
    with pytest.raises(LengthRangeError) as caught:
        waveform_input(16_000, 320, LengthRange.fixed(0.02))
    assert_one_line(caught.value, "too short", "0.040 s")


def test_a_fixed_length_exports_static_shapes():
    spec = waveform_input(16_000, 320, LengthRange.fixed(2.0))
    assert spec.is_static
    assert spec.dynamic_shapes() == ({},)
    assert spec.example_length == 32_000


def test_dynamic_waveform_length_is_a_multiple_of_the_stride():
    spec = waveform_input(16_000, 320, LengthRange(1.0, 10.0))
    (shapes,) = spec.dynamic_shapes()
    program = torch.export.export(torch.nn.Identity(), (torch.zeros(1, 16_000),), dynamic_shapes=({1: shapes[1]},))
    assert str(program.graph_signature.user_inputs) == "('input',)"
    (symbol_range,) = [r for s, r in program.range_constraints.items() if str(s).startswith("320*")]
    assert (symbol_range.lower, symbol_range.upper) == (16_000, 160_000)


def test_input_spec_round_trips_through_a_dictionary():
    spec = mel_input(24_000, 256, 100, LengthRange(1.0, 10.0))
    assert InputSpec.from_dict(spec.to_dict()) == spec


def test_random_inputs_are_seeded():
    spec = waveform_input(16_000, 320, LengthRange(1.0, 10.0))
    (first,) = spec.random_inputs(16_000, seed=3)
    (again,) = spec.random_inputs(16_000, seed=3)
    (other,) = spec.random_inputs(16_000, seed=4)
    assert first.dtype == torch.float32
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_a_built_model_describes_itself_as_json():
    import json

    from audiodeploy import recipes

    for name in ("wav2vec2", "univnet"):
        described = json.loads(recipes.get(name).build("tiny").describe().to_json())
        assert described["recipe"] == name and described["variant"] == "tiny"
        assert described["weights"].startswith("synthetic (seed 0)")
        assert InputSpec.from_dict(described["input"]).kind in ("waveform", "mel")
        assert OutputSpec.from_dict(described["output"]).kind in ("ctc-logits", "waveform")
        assert (described["vocabulary"] is None) == (name == "univnet")
        assert (described["mel"] is None) == (name == "wav2vec2")
