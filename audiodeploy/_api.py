"""``audiodeploy.lower``: the lowering core, with audiodeploy's runtime running the programs it measures.

The core (:func:`audiodeploy.lowering.lower`) imports nothing of the runtime: a quantized program's fidelity is
measured through a :class:`~audiodeploy.lowering.ProgramRunner` its caller gives. This is that caller for users,
above both (tests/test_layers.py): the runner is :func:`run_on_runtime` unless they give their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from audiodeploy.lowering.pipeline import LoweredProgram, LoweringOptions, Method, ProgramRunner
from audiodeploy.lowering.pipeline import lower as lower_core
from audiodeploy.lowering.quantize import Inputs, Progress


def lower(
    program: torch.nn.Module | Mapping[str, Method],
    example_inputs: tuple[Any, ...] | None = None,
    *,
    dynamic_shapes: Any = None,
    options: LoweringOptions = LoweringOptions(),  # noqa: B008 (frozen: a shared default cannot change)
    run_program: ProgramRunner | None = None,
    progress: Progress | None = None,
) -> LoweredProgram:
    """Lower ``program`` to an ExecuTorch program with XNNPACK delegates: :func:`audiodeploy.lowering.lower`.

    A quantized program is run by ``run_program`` to measure its fidelity; by default, :func:`run_on_runtime`.

        lowered = audiodeploy.lower(module, (x,), dynamic_shapes=({2: Dim("length", max=4000)},))
        int8 = audiodeploy.Quantization(audiodeploy.QuantizationScheme.INT8_DYNAMIC, keep_fp32=["*.lm_head"])
        lowered = audiodeploy.lower(module, (x,), options=audiodeploy.LoweringOptions(quantization=int8))
    """
    return lower_core(
        program,
        example_inputs,
        dynamic_shapes=dynamic_shapes,
        options=options,
        run_program=run_program or run_on_runtime,
        progress=progress,
    )


def run_on_runtime(program: bytes, data: bytes | None, method: str, inputs: Inputs) -> list[list[Any]]:
    """A :class:`~audiodeploy.lowering.ProgramRunner` on audiodeploy's one loader (its log at DEBUG).

    The bytes were made by this process, so they are trusted: no child-process probe, the checks all the same.
    """
    from audiodeploy.runtime.program import Program

    loaded = Program(program, origin="the quantized program", data=data, trusted=True)
    return [loaded.run(tuple(case), method) for case in inputs]
