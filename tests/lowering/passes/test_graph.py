"""The passes' shared graph helpers: an op call's arguments by name."""

from __future__ import annotations

import operator

import pytest
import torch

from audiodeploy.lowering.passes._graph import arguments

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
