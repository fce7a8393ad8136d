"""SEW and SEW-D encoders that export for every input length: the same modules, with a forward that does not
branch on the parity of the frame count.

The squeezed transformer of SEW and SEW-D runs on T frames average-pooled in pairs (S = T // 2), adds a strided
positional convolution of ceil(T / 2) frames (odd kernel) or T // 2 (even), and upsamples S back to 2 S frames,
padding one zero frame when T is odd. transformers writes that as

    min_length = min(position.size(-1), pooled.size(-1))          # SEW; SEW-D slices position to pooled.size(-1)
    hidden = pooled[..., :min_length] + position[..., :min_length]
    ...
    if upsampled.shape[1] < T: upsampled = pad(upsampled, (0, 0, 0, T - upsampled.shape[1]))

Under `torch.export` with a dynamic length, `min`, the `if`, and the contiguity check of a slice along the last
axis are decided for the example input's parity: the program then only holds for lengths whose frame count has
that parity (every other multiple of 320 samples), and the exported module's guard fails on the others. Here the
position frames are sliced after the transpose to (batch, time, channels), where the slice keeps the layout
whatever T is, to the pooled length (never longer: see above), and the pad is always applied, by T - 2 S frames
(0 or 1). Outputs are bit-identical to transformers' for every length.

Only inference without an attention mask (one unpadded utterance, what the export wrappers pass) takes this path;
with a mask, or in training, the encoder runs transformers' own forward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.sew.modeling_sew import SEWEncoder
from transformers.models.sew_d.modeling_sew_d import SEWDEncoder

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def _squeezed(encoder: SEWEncoder | SEWDEncoder, hidden_states: torch.Tensor) -> torch.Tensor:
    """(batch, T, hidden) → (batch, T // squeeze, hidden): pooled frames plus the strided positional convolution."""
    channels_first = hidden_states.transpose(1, 2)
    pooled = encoder.pool(channels_first).transpose(1, 2)
    position = encoder.pos_conv_embed(channels_first).transpose(1, 2)
    return pooled + position[:, : pooled.shape[1]]


def _unsqueezed(encoder: SEWEncoder | SEWDEncoder, hidden_states: torch.Tensor, frames: int) -> torch.Tensor:
    """(batch, S, hidden) → (batch, `frames`, hidden): upsampled to S × squeeze frames, then zero frames up to
    `frames`."""
    upsampled = encoder.upsample(hidden_states)
    return nn.functional.pad(upsampled, (0, 0, 0, frames - upsampled.shape[1]))


class ExportableSEWEncoder(SEWEncoder):
    """transformers' `SEWEncoder` with a forward that holds for every frame count (see the module docstring)."""

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any
    ) -> BaseModelOutput:
        if attention_mask is not None or self.training:
            return super().forward(hidden_states, attention_mask, **kwargs)
        frames = hidden_states.shape[1]
        hidden_states = _squeezed(self, hidden_states)
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=None)
        hidden_states = self.dropout(self.layer_norm(hidden_states))
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=mask, **kwargs)
        return BaseModelOutput(last_hidden_state=_unsqueezed(self, hidden_states, frames))


class ExportableSEWDEncoder(SEWDEncoder):
    """transformers' `SEWDEncoder` with a forward that holds for every frame count (see the module docstring)."""

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any
    ) -> BaseModelOutput:
        if attention_mask is not None or self.training:
            return super().forward(hidden_states, attention_mask, **kwargs)
        frames = hidden_states.shape[1]
        hidden_states = _squeezed(self, hidden_states)
        # What transformers passes without a mask: every squeezed frame valid.
        mask = torch.ones(hidden_states.shape[:2], dtype=torch.long, device=hidden_states.device)
        hidden_states = self.encoder(hidden_states, mask, **kwargs).last_hidden_state
        return BaseModelOutput(last_hidden_state=_unsqueezed(self, hidden_states, frames))


_EXPORTABLE: dict[type[nn.Module], type[nn.Module]] = {
    SEWEncoder: ExportableSEWEncoder,
    SEWDEncoder: ExportableSEWDEncoder,
}


def exportable_squeezed_encoder(model: PreTrainedModel) -> PreTrainedModel:
    """`model` (any head of SEW or SEW-D) with its encoder's class replaced by the exportable one, in place: the
    same module, parameters and state-dict names; only `forward` differs."""
    encoder = model.base_model.encoder
    for original, exportable in _EXPORTABLE.items():
        if type(encoder) in (original, exportable):
            encoder.__class__ = exportable
            return model
    raise TypeError(f"{type(model).__name__} has no SEW or SEW-D encoder (its encoder is {type(encoder).__name__})")
