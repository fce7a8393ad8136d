"""wav2vec2 and HuBERT (tiny) lowered whole: one XNNPACK delegate, nothing outside, eager's numbers.

The graph rewrites of ``audiodeploy.lowering.passes`` exist for these models; this
is their end-to-end test over the recipes' full 1-10 s range (test size, so fast).
"""

from __future__ import annotations

import pytest
import torch

import audiodeploy
from audiodeploy import recipes
from tests.pipeline import run_lowered

CASES = [("wav2vec2", "transformers"), ("hubert", "transformers")]


@pytest.mark.parametrize("name, source", CASES, ids=["-".join(case) for case in CASES])
def test_fp32_tiny_speech_encoder_is_one_delegate_and_matches_eager_at_1_and_10_s(name, source):
    built = recipes.get(name).build(variant="tiny", source=source)
    lowered = audiodeploy.lower(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes)
    report = lowered.report.methods["forward"]
    assert (report.delegates, report.ops_outside_delegates) == (1, {}), str(lowered.report)
    for length in (built.input.min_length, built.input.max_length):
        inputs = built.random_inputs(length, seed=length)
        with torch.no_grad():
            expected = built.module(*inputs)
        torch.testing.assert_close(run_lowered(lowered, inputs), expected, atol=built.atol, rtol=0)
