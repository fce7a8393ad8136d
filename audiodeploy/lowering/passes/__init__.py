"""Graph passes of the lowering; one per module.

:data:`XNNPACK_REWRITES` are the ATen-level rewrites applied right after export,
in this order, so that the XNNPACK partitioner can take the whole program.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.export import ExportedProgram

from audiodeploy.lowering.passes.argmax_as_max_pooling import ArgmaxAsMaxPoolingPass
from audiodeploy.lowering.passes.attention_heads_as_batch import AttentionHeadsAsBatchPass
from audiodeploy.lowering.passes.average_pooling_as_image import AveragePoolingAsImagePass
from audiodeploy.lowering.passes.banded_masks_as_arithmetic import BandedMasksAsArithmeticPass
from audiodeploy.lowering.passes.casts_after_data_movement import CastsAfterDataMovementPass
from audiodeploy.lowering.passes.casts_before_data_movement import CastsBeforeDataMovementPass
from audiodeploy.lowering.passes.cdist_as_gemm import CdistAsGemmPass
from audiodeploy.lowering.passes.channel_selections_as_convolutions import ChannelSelectionsAsConvolutionsPass
from audiodeploy.lowering.passes.clipped_relative_positions_as_one_hot_bmm import (
    ClippedRelativePositionsAsOneHotBmmPass,
)
from audiodeploy.lowering.passes.concat_of_slices_as_linear import ConcatOfSlicesAsLinearPass
from audiodeploy.lowering.passes.constant_matmul_as_linear import ConstantMatmulAsLinearPass
from audiodeploy.lowering.passes.conv_chains_as_images import ConvChainsAsImagesPass
from audiodeploy.lowering.passes.conv_tail_slice_as_padding import ConvTailSliceAsPaddingPass
from audiodeploy.lowering.passes.decompose_normalization import DecomposeNormalizationPass
from audiodeploy.lowering.passes.depthwise_transposed_conv_as_phases import DepthwiseTransposedConvAsPhasesPass
from audiodeploy.lowering.passes.drop_aliases import DropAliasesPass
from audiodeploy.lowering.passes.drop_arithmetic_with_neutral_fills import DropArithmeticWithNeutralFillsPass
from audiodeploy.lowering.passes.drop_masks_that_mask_nothing import DropMasksThatMaskNothingPass
from audiodeploy.lowering.passes.drop_unread_constants import DropUnreadConstantsPass
from audiodeploy.lowering.passes.embedding_as_one_hot_gemm import EmbeddingAsOneHotGemmPass
from audiodeploy.lowering.passes.erf_gelu_as_gelu import ErfGeluAsGeluPass
from audiodeploy.lowering.passes.feature_slices_as_linears import FeatureSlicesAsLinearsPass
from audiodeploy.lowering.passes.full_like_as_clamp import FullLikeAsClampPass
from audiodeploy.lowering.passes.indexing_of_length_cut_constants import IndexingOfLengthCutConstantsPass
from audiodeploy.lowering.passes.integer_scalars_as_floats import IntegerScalarsAsFloatsPass
from audiodeploy.lowering.passes.inverse_stft_as_convolution import InverseStftAsConvolutionPass
from audiodeploy.lowering.passes.length_only_values_as_constants import LengthOnlyValuesAsConstantsPass
from audiodeploy.lowering.passes.location_variable_conv_as_bmm import LocationVariableConvAsBmmPass
from audiodeploy.lowering.passes.lstm_as_steps import LstmAsStepsPass
from audiodeploy.lowering.passes.overlap_add_of_irfft_frames_as_convolution import (
    OverlapAddOfIrfftFramesAsConvolutionPass,
)
from audiodeploy.lowering.passes.padding_by_a_size_as_concat import PaddingBySizeAsConcatPass
from audiodeploy.lowering.passes.parameter_only_values_as_constants import ParameterOnlyValuesAsConstantsPass
from audiodeploy.lowering.passes.reflect_padding_as_concat import ReflectPaddingAsConcatPass
from audiodeploy.lowering.passes.relative_position_gather_as_shift import RelativePositionGatherAsShiftPass
from audiodeploy.lowering.passes.relative_shift_of_sinusoids_as_gemms import RelativeShiftOfSinusoidsAsGemmsPass
from audiodeploy.lowering.passes.replicate_padding_as_concat import ReplicatePaddingAsConcatPass
from audiodeploy.lowering.passes.reshape_round_trips_around_row_ops import ReshapeRoundTripsAroundRowOpsPass
from audiodeploy.lowering.passes.sdpa_as_matmuls import SdpaAsMatmulsPass
from audiodeploy.lowering.passes.size_min_max_as_arithmetic import SizeMinMaxAsArithmeticPass
from audiodeploy.lowering.passes.sizes_read_from_inputs import SizesReadFromInputsPass
from audiodeploy.lowering.passes.split_as_linears import SplitAsLinearsPass
from audiodeploy.lowering.passes.squeeze_unsqueeze_pairs import SqueezeUnsqueezePairsPass
from audiodeploy.lowering.passes.static_reshape import StaticReshapePass
from audiodeploy.lowering.passes.strided_conv_as_frame_gemms import StridedConvAsFrameGemmsPass
from audiodeploy.lowering.passes.strided_conv_as_gemm import StridedConvAsGemmPass
from audiodeploy.lowering.passes.sum_and_mean_as_xnnpack_reductions import SumAndMeanAsXnnpackReductionsPass
from audiodeploy.lowering.passes.tanh_gelu_as_tanh import TanhGeluAsTanhPass
from audiodeploy.lowering.passes.transposed_conv_as_polyphase import TransposedConvAsPolyphasePass
from audiodeploy.lowering.passes.unbind_as_selects import UnbindAsSelectsPass
from audiodeploy.lowering.passes.unit_select_as_squeeze import UnitSelectAsSqueezePass
from audiodeploy.lowering.passes.unpack_split_of_cat import UnpackSplitOfCatPass
from audiodeploy.lowering.passes.vector_norm_as_sum_of_squares import VectorNormAsSumOfSquaresPass

XNNPACK_REWRITES = (
    SizeMinMaxAsArithmeticPass,  # sizes only; first, so the passes below read a size where one is known
    OverlapAddOfIrfftFramesAsConvolutionPass,  # before LengthOnlyValuesAsConstantsPass would store its envelope
    DropMasksThatMaskNothingPass,  # before the next: a mask that masks nothing is dropped, not stored
    BandedMasksAsArithmeticPass,  # after it; before the next, which stores the positions it computes from
    DropArithmeticWithNeutralFillsPass,  # before the fills are stored or clamped; frees convolutions to be cut
    ClippedRelativePositionsAsOneHotBmmPass,  # before the next, which would store its [T, T, D] rows
    RelativeShiftOfSinusoidsAsGemmsPass,  # before the next, which would store its position side
    RelativePositionGatherAsShiftPass,  # before the next, which stores the rows it selects where no larger than the table
    LengthOnlyValuesAsConstantsPass,  # what it replaces may hold reshapes the others would rewrite
    ParameterOnlyValuesAsConstantsPass,  # early: the rewrites below see its values as the constants they are
    IndexingOfLengthCutConstantsPass,  # after the two above, which cut constants to the length; before slice rewrites
    ConcatOfSlicesAsLinearPass,  # after it (it drops no-op slices); before the passes below that take slices and cats
    FullLikeAsClampPass,  # after the passes above, which drop or store some fills whole; emits clamps
    ErfGeluAsGeluPass,  # emits gelu, which the conv chain passes below carry as one elementwise op
    CdistAsGemmPass,  # after the passes that store a computed codebook as a constant; emits linears
    ArgmaxAsMaxPoolingPass,  # after it: searches its distances; emits views and casts the two below move and read
    CastsAfterDataMovementPass,  # after it: moves the casts of its indices past views and stacks
    EmbeddingAsOneHotGemmPass,  # after the two above: reads the float index, through the views they moved
    UnbindAsSelectsPass,  # before the next, which moves casts up past selections, not past an unbind
    CastsBeforeDataMovementPass,  # after it: moves the casts it puts on input codes up past their selections
    DropAliasesPass,  # a detach or a whole-dimension slice is an alias_copy XNNPACK declines
    ReshapeRoundTripsAroundRowOpsPass,  # after it and the mask passes: only the softmax is left between the reshapes
    UnpackSplitOfCatPass,  # a packed bias split across GEMMs is computed; its pieces are not
    SplitAsLinearsPass,  # after it: a packed bias is unpacked where the linears are separate already
    LocationVariableConvAsBmmPass,  # emits convolutions (stride 1), permutes and reshapes the passes below tidy
    ChannelSelectionsAsConvolutionsPass,  # after the three above (they take some splits and slices whole); emits conv1d
    UnitSelectAsSqueezePass,  # after it (it takes selections of channels); emits squeezes the reshape passes take
    TransposedConvAsPolyphasePass,  # emits a stride-1 convolution, pads and views already static: before the reshape passes
    ConvTailSliceAsPaddingPass,  # before the next, which takes a strided convolution apart
    StridedConvAsFrameGemmsPass,  # before the next, which takes the strided convolutions this one leaves
    StridedConvAsGemmPass,  # emits unsqueezes and squeezes
    DecomposeNormalizationPass,  # emits means, reshapes, unsqueezes and squeezes
    SdpaAsMatmulsPass,  # emits 4-D matmuls
    AttentionHeadsAsBatchPass,  # emits reshapes
    FeatureSlicesAsLinearsPass,  # after the passes above that take slices whole (a cat of slices, a head's slices)
    ReplicatePaddingAsConcatPass,  # emits reshapes and stride-1 convolutions
    ReflectPaddingAsConcatPass,  # the same selection as the one above; before the conv chain and reshape passes
    PaddingBySizeAsConcatPass,  # emits a cat and full blocks of sizes (read from the input by a pass below)
    DepthwiseTransposedConvAsPhasesPass,  # emits unsqueezes and a reshape
    InverseStftAsConvolutionPass,  # emits convolutions and a view already static: before the reshape passes
    VectorNormAsSumOfSquaresPass,  # emits a conv1d or a sum: before the next and the conv chain pass
    SumAndMeanAsXnnpackReductionsPass,  # emits reshapes
    AveragePoolingAsImagePass,  # emits an unsqueeze and a squeeze on a one-column image, as the next pass does
    ConvChainsAsImagesPass,  # after every rewrite that emits or matches a conv1d; emits unsqueezes and squeezes
    SqueezeUnsqueezePairsPass,  # after every rewrite that emits squeezes and unsqueezes
    TanhGeluAsTanhPass,  # after the two above, which carry a gelu along convolutions as one op, not its pieces
    ConstantMatmulAsLinearPass,  # after every rewrite that emits a matmul of a constant
    LstmAsStepsPass,  # late: its slices, cats and permutes are static; no pass after it takes them apart
    IntegerScalarsAsFloatsPass,  # late: also the integer scalars the rewrites above emit
    StaticReshapePass,  # every reshape the others left or emitted
    SizesReadFromInputsPass,  # after every rewrite that reads a size
    DropUnreadConstantsPass,  # last: what the model never read, and what the rewrites above left unread
)


@dataclass(frozen=True)
class Rewritten:
    """What :data:`XNNPACK_REWRITES` did to one program."""

    changed: tuple[str, ...]
    """The passes (class names) that changed it, in the order they ran."""
    skipped: dict[tuple[str, str], tuple[str, ...]]
    """(pass, reason) -> the nodes that pass looked at and left as they were, for that reason."""


def rewrite_for_xnnpack(ep: ExportedProgram) -> Rewritten:
    """Apply :data:`XNNPACK_REWRITES` to ``ep`` in place; which changed it, and what each left as it was, and why."""
    changed = []
    skipped: dict[tuple[str, str], list[str]] = {}
    for pass_class in XNNPACK_REWRITES:
        rewrite = pass_class(ep)
        if rewrite(ep.graph_module).modified:
            changed.append(pass_class.__name__)
        for node, reason in getattr(rewrite, "skipped", ()):
            skipped.setdefault((pass_class.__name__, reason), []).append(node)
    return Rewritten(tuple(changed), {key: tuple(nodes) for key, nodes in skipped.items()})
