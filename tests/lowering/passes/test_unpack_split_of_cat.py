"""A packed bias split back into its pieces feeds each GEMM its own parameter."""

import torch
import torch.nn.functional as F

from tests.pipeline import assert_rewrites, lower_and_compare


class PackedQkvBias(torch.nn.Module):
    """What multi_head_attention_forward does with separate projection biases."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(8, 8)
        self.k = torch.nn.Linear(8, 8)
        self.v = torch.nn.Linear(8, 8)

    def forward(self, x):
        packed = torch.cat((self.q.bias, self.k.bias, self.v.bias))
        q_bias, k_bias, v_bias = packed.split(8)
        q = F.linear(x, self.q.weight, q_bias)
        k = F.linear(x, self.k.weight, k_bias)
        v = F.linear(x, self.v.weight, v_bias)
        return q + k * v


class SlicedPack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Parameter(torch.randn(6, 8))
        self.second = torch.nn.Parameter(torch.randn(4, 8))

    def forward(self, x):
        packed = torch.cat((self.first, self.second))
        return F.linear(x, packed[6:10]) + F.linear(x, packed[:6]).sum(-1, keepdim=True)


def test_fp32_packed_qkv_bias_is_unpacked_and_every_linear_delegated():
    torch.manual_seed(0)
    module = PackedQkvBias().eval()
    x = torch.randn(5, 8)
    stock = lower_and_compare(module, (x,), fold=False)
    assert len(stock.gemms_not_delegated) == 3  # stock lowering leaves the packed bias alone
    report = lower_and_compare(module, (x,))
    assert report.gemms_not_delegated == ()
    assert report.folds == () and report.not_folded == ()
    assert "aten.cat" not in report.ops_outside_delegates
    assert "UnpackSplitOfCatPass" in report.rewrites


def test_fp32_slices_covering_one_cat_input_are_unpacked():
    torch.manual_seed(0)
    counts = {"aten.cat.default": 0, "aten.slice.Tensor": 0}
    result = assert_rewrites(SlicedPack().eval(), [(torch.randn(3, 8),)], "UnpackSplitOfCatPass", counts)
    # Each linear reads its weight from a parameter, as XNNPACK needs it.
    linears = [node for node in result.program.graph.nodes if node.target == torch.ops.aten.linear.default]
    assert linears and all(linear.args[1].op == "placeholder" for linear in linears)
