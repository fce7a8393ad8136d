"""Every recipe and source, at its tiny configuration, lowered with audiodeploy: every GEMM delegated,
and the .pte matches eager within the recipe's tolerance at the shortest and longest input.

wav2vec2 and HuBERT, the models the graph rewrites of ``audiodeploy.lowering.passes`` exist for, are one
delegate with nothing outside over the recipes' full 1-10 s range."""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from tests.pipeline import lowered_tiny_recipe, run_lowered

GEMM_OPS = {"aten.convolution", "aten.linear", "aten.addmm", "aten.mm"}

# Recipes whose program is still cut, with what may stay outside. UnivNet: its location-variable convolutions are
# delegated (LocationVariableConvAsBmmPass); the reflect padding of conv_pre and conv_post (index arithmetic) and
# the slice of the fixed noise are not.
CUT = {
    "univnet": (
        3,
        {
            "aten.abs",
            "aten.sub",
            "aten.arange",
            "aten.index",
            "aten.slice_copy",
            "scalar_tensor.default",
            "dim_order_ops._to_dim_order_copy",
            "sym_size.int",
        },
    )
}

# Recipes lowered whole, every variant and source: one delegate, nothing outside.
WHOLE = {"wav2vec2", "hubert"}

CASES = [
    (name, variant, source)
    for name in recipes.available()
    for variant in recipes.get(name).variant_names(include_hidden=True)
    if variant.startswith("tiny")
    for source in recipes.get(name).sources
]


@pytest.mark.parametrize("name, variant, source", CASES, ids=["-".join(case) for case in CASES])
def test_fp32_tiny_recipe_lowers_with_every_gemm_delegated_and_matches_eager(name, variant, source):
    built, lowered = lowered_tiny_recipe(name, variant, source)
    report = lowered.report.methods["forward"]
    assert report.gemms_not_delegated == (), report.gemms_not_delegated
    assert not GEMM_OPS & set(report.ops_outside_delegates), report.ops_outside_delegates
    assert report.not_folded == ()
    if name in CUT:
        most_delegates, may_stay_outside = CUT[name]
        assert report.delegates <= most_delegates, report.ops_outside_delegates
        assert set(report.ops_outside_delegates) <= may_stay_outside, report.ops_outside_delegates
    if name in WHOLE:
        assert (report.delegates, report.ops_outside_delegates) == (1, {}), str(lowered.report)
    for length in (built.input.min_length, built.input.max_length):
        inputs = built.random_inputs(length, seed=length)
        with torch.no_grad():
            expected = built.module(*inputs)
        torch.testing.assert_close(run_lowered(lowered, inputs), expected, atol=built.atol, rtol=0)
