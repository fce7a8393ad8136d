"""The passes' shared graph helpers: an op call's arguments by name, the fake values of the ops they insert."""

from __future__ import annotations

import operator

import pytest
import torch

from audiodeploy.lowering.passes._graph import arguments, fake_value

aten = torch.ops.aten


def call(target, *args, **kwargs) -> torch.fx.Node:
    """A call of ``target`` in a graph of two inputs, which the arguments ``"x"`` and ``"w"`` stand for."""
    graph = torch.fx.Graph()
    inputs = {name: graph.placeholder(name) for name in ("x", "w")}

    def node(argument):
        return inputs[argument] if isinstance(argument, str) and argument in inputs else argument

    return graph.call_function(target, tuple(map(node, args)), {k: node(v) for k, v in kwargs.items()})


def test_an_argument_reads_the_same_by_position_by_keyword_or_left_out():
    by_position = arguments(call(aten.slice.Tensor, "x", 2, 0, -3, 1))
    by_keyword = arguments(call(aten.slice.Tensor, "x", dim=2, end=-3))
    assert {k: v for k, v in by_position.items() if k != "input"} == {"dim": 2, "start": 0, "end": -3, "step": 1}
    assert {k: v for k, v in by_keyword.items() if k != "input"} == {"dim": 2, "start": None, "end": -3, "step": 1}
    assert by_position["input"].name == by_keyword["input"].name == "x"


def test_defaults_are_the_schemas():
    conv = arguments(call(aten.conv_transpose1d.default, "x", "w", None, [2]))
    assert (conv["stride"], conv["padding"], conv["output_padding"], conv["groups"], conv["dilation"]) == (
        [2], [0], [0], 1, [1],
    )  # fmt: skip
    assert arguments(call(aten.mean.dim, "x", [1]))["keepdim"] is False
    assert arguments(call(aten.var.correction, "x", [1], correction=0))["correction"] == 0


def test_a_schema_torch_fx_declines_is_bound_here():
    # uniform.out's `from`, a Python keyword, is positional-only: torch.fx returns no normalization.
    node = call(aten.uniform.out, "x", 0.5, out="w")
    assert node.normalized_arguments(None, normalize_to_only_use_kwargs=True) is None
    given = arguments(node)
    assert (given["from"], given["to"], given["generator"], given["out"].name) == (0.5, 1.0, None, "w")


def test_a_call_without_a_schema_is_refused():
    with pytest.raises(TypeError, match="schema"):
        arguments(call(operator.getitem, "x", 0))


def test_a_convolution_computed_on_fake_values_leaves_the_length_range_as_it_was():
    """torch's fake convolution picks eager's CPU kernel by comparing the input's size with a threshold (oneDNN
    past 20480 elements): on the example's length that would narrow the exported range to the example's side."""

    class Conv(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return x + 1, w

    frames = torch.export.Dim("frames", min=87, max=862)
    ep = torch.export.export(
        Conv(), (torch.randn(1, 128, 1, 87), torch.randn(64, 128, 1, 7)), dynamic_shapes=({3: frames}, None)
    )
    x, w = [n for n in ep.graph.nodes if n.op == "placeholder"]
    env = x.meta["val"].shape[3].node.shape_env
    before = dict(env.var_to_range)

    value = fake_value(aten.conv2d.default, (x, w), {}, like=x)

    assert env.var_to_range == before
    assert str(value.shape[3]) == str(x.meta["val"].shape[3] - 6)
