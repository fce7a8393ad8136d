"""Every recipe and source, at its tiny configuration, lowered with audiodeploy: every GEMM delegated,
and the .pte matches eager within the recipe's tolerance at the shortest and longest input.

wav2vec2 and HuBERT, the models the graph rewrites of ``audiodeploy.lowering.passes`` exist for, are one
delegate with nothing outside over the recipes' full 1-10 s range.

One lowering per distinct graph: torchaudio's wav2vec2 and HuBERT write, after export and the rewrites, the graph
transformers' do, node for node (every op and every shape; transformers adds one unused parameter), and HuBERT's
pre-norm layout (tiny-large) writes wav2vec2's (tiny-lv60). HuBERT's tiny writes wav2vec2's tiny after the
waveform's normalization, which wav2vec2's tiny has and HuBERT's base checkpoints go without. SpeechT5's HiFi-GAN
with spectral norm writes, once its weights are folded, the graph it writes with weight norm. What XNNPACK delegates
is decided by that graph, so such a case is checked on it: the same graph as the lowered one, and the same numbers as
its own eager module at both ends of the range. WavLM's two sources write different graphs (torchaudio's attention
uses ``baddbmm``) and both are lowered. (A tiny lowering is 20-35 s of CPU here; these five would be a seventh of
the suite's.)"""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from tests.pipeline import lowered_tiny_recipe, run_lowered, tiny_length_range
from tests.pipeline import rewritten as rewritten_program
from tests.shared import shared_value

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

# Families whose torchaudio source writes the transformers source's graph (see the module's docstring).
SAME_GRAPH_AS_TRANSFORMERS = {"wav2vec2", "hubert"}
# Variants whose (transformers) graph is another family's variant's, node for node.
SAME_GRAPH_AS_VARIANT = {
    ("hubert", "tiny-large"): ("wav2vec2", "tiny-lv60"),
    ("hubert", "tiny"): ("wav2vec2", "tiny"),
    # Spectral norm computes its weights from other parameters than weight norm; once folded, the graphs are one.
    ("speecht5-hifigan", "tiny-spectral-norm"): ("speecht5-hifigan", "tiny"),
}

# The ops of a waveform's zero-mean, unit-variance normalization (the feature extractor's ``do_normalize``).
NORMALIZATION_OPS = {
    "aten.view.default",
    "aten.mean.dim",
    "aten.sub.Tensor",
    "aten.mul.Tensor",
    "aten.add.Tensor",
    "aten.sqrt.default",
    "aten.div.Tensor",
}

# WavLM's pre-norm layout (tiny-large) is the layout wav2vec2's tiny-lv60 and HuBERT's tiny-large lower already; what
# WavLM adds (gated relative position bias) is the same in both its layouts, so only tiny is lowered.
LAYOUT_LOWERED_ELSEWHERE = {("wavlm", "tiny-large")}

# The transformers-only speech encoders: built and exported at test size in test_speech_encoders.py, their lowering
# measured by hand when they were added, not lowered here (a tiny lowering is 30-120 s of CPU; the suite's budget).
NOT_LOWERED_HERE = {
    "unispeech",
    "unispeech-sat",
    "data2vec-audio",
    "sew",
    "sew-d",
    "wav2vec2-bert",
    "wav2vec2-conformer",
    "dac",  # a codec: both its methods are lowered and checked through the command line (tests/test_cli_codec.py)
    "mimi",  # a codec, built in tests/recipes/test_mimi.py
    "encodec",  # a codec, built in tests/recipes/test_encodec.py
    "vits",  # text to speech: lowered from a test-written voice and checked whole (tests/recipes/test_vits.py)
}
# wav2vec2-bert's tiny-adapter is lowered once, by the runtime's test of its filterbank input
# (tests/runtime/test_model.py); the lowering of both tiny layouts was measured by hand.

TINY = [
    (name, variant, source)
    for name in recipes.available()
    if name not in NOT_LOWERED_HERE
    for variant in recipes.get(name).variant_names(include_hidden=True)
    if variant.startswith("tiny") and (name, variant) not in LAYOUT_LOWERED_ELSEWHERE
    for source in recipes.get(name).sources
]


def lowered_as(case: tuple[str, str, str]) -> tuple[str, str, str]:
    """The lowered case whose graph `case` writes (itself if it is lowered)."""
    name, variant, source = case
    if name in SAME_GRAPH_AS_TRANSFORMERS:
        source = "transformers"
    return (*SAME_GRAPH_AS_VARIANT.get((name, variant), (name, variant)), source)


CASES = [case for case in TINY if lowered_as(case) == case]
SAME_GRAPH = [case for case in TINY if case not in CASES]


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


def rewritten(built: recipes.BuiltModel) -> torch.export.ExportedProgram:
    """The ATen program ``lower()`` partitions: exported over the recipe's range, rewritten for XNNPACK, and every
    computed weight folded (none may be left)."""
    program = rewritten_program(built.module, built.example_inputs, built.dynamic_shapes)
    assert program.not_folded == (), program.not_folded
    return program.program


def computation(program: torch.export.ExportedProgram) -> list[tuple[str, str]]:
    """Every op of ``program`` in order with the shape it makes (symbols included), and the inputs' shapes."""
    nodes = []
    for node in program.graph.nodes:
        value = node.meta.get("val")
        shape = str(tuple(value.shape)) if isinstance(value, torch.Tensor) else repr(type(value).__name__)
        if node.op == "call_function" and node.target is not torch.ops.aten._assert_tensor_metadata.default:
            nodes.append((str(node.target), shape))
        elif node.op == "placeholder" and node.name in program.graph_signature.user_inputs:
            nodes.append(("input", shape))
    return nodes


def after_input_normalization(nodes: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`nodes` (a `computation`) without the normalization of the waveform it may open with: every op up to the
    division that gives the input's shape, when each is a normalization op."""
    (_, input_shape), *body = nodes
    for index, (op, shape) in enumerate(body):
        if op not in NORMALIZATION_OPS:
            return nodes
        if op == "aten.div.Tensor" and shape == input_shape:
            return [nodes[0], *body[index + 1 :]]
    return nodes


@pytest.mark.parametrize("name, variant, source", SAME_GRAPH, ids=["-".join(case) for case in SAME_GRAPH])
def test_fp32_tiny_recipe_writes_a_lowered_graph_and_matches_eager(name, variant, source):
    built = recipes.get(name).build(variant=variant, source=source, length_range=tiny_length_range(name))
    program = rewritten(built)
    lowered_name, lowered_variant, lowered_source = lowered_as((name, variant, source))
    # Three cases write each lowered graph: it is rewritten once per test run (tests/shared.py).
    lowered_recipe = recipes.get(lowered_name)
    lowered = shared_value(
        f"folded-{lowered_name}-{lowered_variant}-{lowered_source}",
        lambda: computation(
            rewritten(
                lowered_recipe.build(
                    variant=lowered_variant, source=lowered_source, length_range=tiny_length_range(lowered_name)
                )
            )
        ),
    )
    assert after_input_normalization(computation(program)) == after_input_normalization(lowered)
    # and that graph lowered: every GEMM delegated, one delegate (its case of the test above)
    assert (lowered_name, lowered_variant, lowered_source) in CASES
    module = program.module(check_guards=False)
    for length in (built.input.min_length, built.input.max_length):
        inputs = built.random_inputs(length, seed=length)
        with torch.no_grad():
            torch.testing.assert_close(module(*inputs), built.module(*inputs), atol=built.atol, rtol=0)
