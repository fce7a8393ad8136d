"""The constants nothing reads (the codebooks a quantizer's bandwidth leaves out, a training statistic) are not
stored in the program; a buffer the program writes stays."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import audiodeploy
from tests.pipeline import assert_matches_eager, rewritten

CODEBOOK_BYTES = 256 * 64 * 4


class ResidualDecode(torch.nn.Module):
    """A residual quantizer's decode at a bandwidth that reads the first two of its eight codebooks."""

    def __init__(self) -> None:
        super().__init__()
        for index in range(8):
            self.register_buffer(f"codebook{index}", torch.randn(256, 64))
        self.register_buffer("running_mean", torch.randn(256, 64), persistent=False)  # learnt by, read by nothing
        self.out = torch.nn.Conv1d(64, 8, 1)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        quantized = F.embedding(codes[..., 0], self.codebook0) + F.embedding(codes[..., 1], self.codebook1)
        return self.out(quantized.transpose(1, 2))


def codes(frames: int, seed: int) -> tuple[torch.Tensor]:
    return (torch.randint(0, 256, (1, frames, 2), generator=torch.Generator().manual_seed(seed)),)


def test_the_program_keeps_only_the_constants_it_reads():
    torch.manual_seed(0)
    result = rewritten(ResidualDecode().eval(), codes(10, 0))
    assert "DropUnreadConstantsPass" in result.changed
    program = result.program
    kept = {*program.state_dict, *program.constants}
    assert not kept & {*(f"codebook{index}" for index in range(2, 8)), "running_mean"}, kept
    placeholders = [node for node in program.graph.nodes if node.op == "placeholder"]
    assert all(node.users for node in placeholders), [node.name for node in placeholders if not node.users]


def test_fp32_unread_codebooks_leave_the_program_and_it_matches_eager():
    torch.manual_seed(0)
    module = ResidualDecode().eval()
    options = audiodeploy.LoweringOptions(rewrite=False, fold=False)
    stock = audiodeploy.lower(module, codes(10, 0), options=options)
    lowered = audiodeploy.lower(module, codes(10, 0))
    assert "DropUnreadConstantsPass" in lowered.report.methods["forward"].rewrites
    # Seven unread tensors of a codebook's size, which stock lowering stores; two codebooks and a convolution here.
    assert len(stock.buffer) > 9 * CODEBOOK_BYTES and len(lowered.buffer) < 3 * CODEBOOK_BYTES
    assert_matches_eager(lowered, module, codes(10, 1))


class WritesItsState(torch.nn.Module):
    """A buffer the program overwrites without reading it: state, not a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("last", torch.zeros(1, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last.copy_(x)
        return 2 * x


def test_a_buffer_the_program_writes_stays():
    result = rewritten(WritesItsState().eval(), (torch.randn(1, 4),))
    signature = result.program.graph_signature
    assert "DropUnreadConstantsPass" not in result.changed
    assert list(signature.buffers_to_mutate.values()) == ["last"]
    assert list(signature.inputs_to_buffers.values()) == ["last"]
