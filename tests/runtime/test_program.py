import pytest
import torch

import audiodeploy
from audiodeploy.runtime import Program, ProgramLoadError


def test_foreign_bytes_are_rejected_with_a_load_error():
    with pytest.raises(ProgramLoadError, match="not a loadable ExecuTorch program"):
        Program(b"definitely not a flatbuffer" * 10)


def test_truncated_program_is_rejected_with_a_load_error():
    module = torch.nn.Linear(4, 4).eval()
    lowered = audiodeploy.lower(module, (torch.randn(1, 4),))
    with pytest.raises(ProgramLoadError):
        Program(lowered.buffer[: len(lowered.buffer) // 3])


def test_saved_program_loads_and_lists_its_methods(tmp_path):
    module = torch.nn.Linear(4, 4).eval()
    x = torch.randn(2, 4)
    path = audiodeploy.lower(module, (x,)).save(tmp_path / "linear.pte")
    program = Program.load(path)
    assert program.method_names == ["forward"]
    torch.testing.assert_close(program.run((x,))[0], module(x).detach(), atol=1e-5, rtol=1e-4)
