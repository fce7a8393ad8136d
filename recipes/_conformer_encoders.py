"""wav2vec2-conformer's rotary position embedding without its cache, so that the encoder exports for every length.

transformers' `Wav2Vec2ConformerRotaryPositionalEmbedding` keeps the cos/sin table of the last sequence length in
Python attributes and returns it when the next call has the same length:

    if sequence_length == self.cached_sequence_length and self.cached_rotary_positional_embedding is not None:
        return self.cached_rotary_positional_embedding

After an eager call (49 frames for 1 s), `torch.export` with a dynamic length decides that comparison for the
example's length and specializes the program to it (a guard `frames == 49`); an export also leaves a traced tensor
in the cache. Here the table is computed on every call, as transformers computes it on a cache miss: outputs are
bit-identical. The relative position embedding keeps a fixed buffer and needs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import (
    Wav2Vec2ConformerRotaryPositionalEmbedding,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class ExportableRotaryEmbedding(Wav2Vec2ConformerRotaryPositionalEmbedding):
    """transformers' rotary position embedding with the table computed on every call (see the module docstring)."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        time_stamps = torch.arange(hidden_states.shape[1]).type_as(self.inv_freq)
        freqs = time_stamps[:, None] * self.inv_freq
        embeddings = torch.cat((freqs, freqs), dim=-1)
        cos_embeddings = embeddings.cos()[:, None, None, :]
        sin_embeddings = embeddings.sin()[:, None, None, :]
        return torch.stack([cos_embeddings, sin_embeddings]).type_as(hidden_states)


def exportable_conformer_encoder(model: PreTrainedModel) -> PreTrainedModel:
    """`model` (any head of wav2vec2-conformer) with a rotary embedding's class replaced by the exportable one, in
    place: the same module and buffer names; only `forward` differs. A model with relative position embeddings
    is returned as it is."""
    embedding = model.base_model.encoder.embed_positions
    if isinstance(embedding, Wav2Vec2ConformerRotaryPositionalEmbedding):
        embedding.__class__ = ExportableRotaryEmbedding
        embedding.cached_sequence_length = None
        embedding.cached_rotary_positional_embedding = None
    return model
