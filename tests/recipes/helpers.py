"""What every recipe test reads as: build, run eagerly, export with the dynamic shapes, compare at two lengths."""

from __future__ import annotations

import torch

from audiodeploy.recipes import BuiltModel

# torch.export runs the same kernels as eager PyTorch; only op fusion in eager (none here) could differ.
EXPORT_ATOL = 1e-6


def export(built: BuiltModel) -> torch.export.ExportedProgram:
    return torch.export.export(built.module, built.example_inputs, dynamic_shapes=built.dynamic_shapes)


def assert_exports_like_eager(built: BuiltModel) -> torch.export.ExportedProgram:
    """Export `built` for its whole length range; at the shortest and the longest valid input the exported
    program gives eager's output."""
    program = export(built)
    exported = program.module()
    for length in (built.input.min_length, built.input.max_length):
        inputs = built.random_inputs(length, seed=length)
        with torch.no_grad():
            expected = built.module(*inputs)
            actual = exported(*inputs)
        assert actual.shape == expected.shape
        torch.testing.assert_close(actual, expected, atol=EXPORT_ATOL, rtol=0)
    return program


def weight_norm_on_parameters(program: torch.export.ExportedProgram) -> int:
    """How many `aten._weight_norm` nodes of the exported graph compute a weight from two parameters."""
    parameters = set(program.graph_signature.inputs_to_parameters)
    return sum(
        all(argument.name in parameters for argument in node.args[:2])
        for node in program.graph.nodes
        if node.target == torch.ops.aten._weight_norm.default
    )


def assert_one_line(error: BaseException, *fragments: str) -> None:
    """A user-facing error: a single line that contains every fragment."""
    message = str(error)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
