"""VITS's two export wrappers: text to durations and prior (``encode``), prior latents to waveform (``decode``).

transformers' `VitsModel` cannot be exported whole: the number of frames it synthesizes depends on the durations it
predicts. The program is cut there. ``encode`` takes the token ids and the duration noise and gives the prior's means
and log-variances per token and each token's log-duration; the host (`audiodeploy.program.tts`, model-free numpy)
turns durations into frames, expands the prior and draws the latents; ``decode`` takes those latents, runs the
reverse flow and the HiFi-GAN and gives the waveform.

``encode`` computes what `VitsTextEncoder` and `VitsStochasticDurationPredictor(reverse=True)` compute, from their
own weights, but written so that `torch.export` can trace it at any token count and XNNPACK can run it:

- the windowed relative attention picks its relative rows with a one-hot ``[n, K, n]`` built from positions
  (``relu(1 - |j - i + w - r|)``: 1 where key ``j`` is ``r - w`` tokens after query ``i``, 0 elsewhere and beyond
  the window), where transformers skews a padded ``[n, 2n - 1]`` score matrix with views whose sizes export cannot
  prove equal;
- the rational-quadratic spline is computed for every element, its bin chosen by a one-hot from comparisons written
  as clamps, and elements outside the tail bound kept as they are, where transformers indexes the elements inside
  the bound with a boolean mask (a data-dependent size) and gathers each element's bin;
- the padding masks are absent: the program takes one unpadded sentence, whose masks are all ones.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn
from torch.nn import functional

if TYPE_CHECKING:
    from transformers import VitsModel
    from transformers.models.vits.modeling_vits import (
        VitsAttention,
        VitsConvFlow,
        VitsDilatedDepthSeparableConv,
        VitsElementwiseAffine,
        VitsEncoderLayer,
        VitsStochasticDurationPredictor,
    )

# A difference of at least 2^-126 (float32's smallest normal) times this is at least 1: `_at_least` is exact for
# every difference but a subnormal negative one.
_STEP_GAIN = 2.0**126


def _at_least(value: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """``(value >= bound)`` as 1.0 or 0.0, written as arithmetic XNNPACK runs (it takes no comparison)."""
    return torch.clamp((value - bound) * _STEP_GAIN + 1.0, 0.0, 1.0)


def _softplus(value: torch.Tensor) -> torch.Tensor:
    # log(1 + exp(x)) without overflow, from ops XNNPACK runs.
    return torch.relu(value) + torch.log(1.0 + torch.exp(-torch.abs(value)))


def _relative_one_hot(length: int, window: int, like: torch.Tensor) -> torch.Tensor:
    """``[n, 2w + 1, n]``: 1 at ``[i, r, j]`` where ``j - i == r - w``, else 0 (all 0 for ``|j - i| > w``)."""
    positions = torch.arange(length, dtype=like.dtype, device=like.device)
    rows = torch.arange(2 * window + 1, dtype=like.dtype, device=like.device)
    offset = positions[None, None, :] - positions[:, None, None] + window - rows[None, :, None]
    return torch.relu(1.0 - torch.abs(offset))


def _attention(attention: VitsAttention, hidden: torch.Tensor, one_hot: torch.Tensor) -> torch.Tensor:
    """`VitsAttention.forward` for one unpadded sequence ``[1, n, C]``, its relative positions through `one_hot`."""
    length = hidden.shape[1]
    heads, head_dim = attention.num_heads, attention.head_dim

    def by_head(states: torch.Tensor) -> torch.Tensor:
        return states.view(length, heads, head_dim).transpose(0, 1)

    query = by_head(attention.q_proj(hidden) * attention.scaling)
    key = by_head(attention.k_proj(hidden))
    value = by_head(attention.v_proj(hidden))
    scores = torch.bmm(query, key.transpose(1, 2))
    relative_logits = functional.linear(query, attention.emb_rel_k[0])  # [H, n, K]
    scores = scores + torch.bmm(relative_logits.transpose(0, 1), one_hot).transpose(0, 1)
    probabilities = torch.softmax(scores, dim=-1)
    output = torch.bmm(probabilities, value)
    relative_weights = torch.bmm(probabilities.transpose(0, 1), one_hot.transpose(1, 2)).transpose(0, 1)
    output = output + functional.linear(relative_weights, attention.emb_rel_v[0].t())
    return attention.out_proj(output.transpose(0, 1).reshape(1, length, heads * head_dim))


def _encoder_layer(layer: VitsEncoderLayer, hidden: torch.Tensor, one_hot: torch.Tensor) -> torch.Tensor:
    hidden = layer.layer_norm(hidden + _attention(layer.attention, hidden, one_hot))
    feed_forward = layer.feed_forward
    states = hidden.transpose(1, 2)
    if feed_forward.padding is not None:
        states = functional.pad(states, feed_forward.padding[:2])
    states = feed_forward.act_fn(feed_forward.conv_1(states))
    if feed_forward.padding is not None:
        states = functional.pad(states, feed_forward.padding[:2])
    states = feed_forward.conv_2(states)
    return layer.final_layer_norm(hidden + states.transpose(1, 2))


def _dilated_convs(convs: VitsDilatedDepthSeparableConv, inputs: torch.Tensor, conditioning: torch.Tensor | None):
    if conditioning is not None:
        inputs = inputs + conditioning
    for i in range(convs.num_layers):
        states = convs.convs_dilated[i](inputs)
        states = functional.gelu(convs.norms_1[i](states.transpose(1, 2)).transpose(1, 2))
        states = convs.convs_pointwise[i](states)
        states = functional.gelu(convs.norms_2[i](states.transpose(1, 2)).transpose(1, 2))
        inputs = inputs + states
    return inputs


class _SplineTables(nn.Module):
    """The constant weights that write the spline's cumulative sums, differences and gathers as linear layers (a
    `torch.matmul` by a constant would reach XNNPACK as reshapes with a symbolic size, which it declines)."""

    def __init__(self, bins: int):
        super().__init__()
        edges = bins + 1
        # cumulative: edge m is the sum of the first m bins (m = 0 .. bins), the cumsum with a leading 0.
        self.register_buffer("cumulative", torch.tril(torch.ones(edges, bins), diagonal=-1))
        # difference: bin k's size is edge k + 1 minus edge k.
        self.register_buffer("difference", torch.eye(edges)[1:] - torch.eye(edges)[:-1])
        self.register_buffer("last_edge", functional.one_hot(torch.tensor(bins), edges).float())
        self.register_buffer("lower_edges", torch.eye(edges)[:-1].clone())
        self.register_buffer("upper_edges", torch.eye(edges)[1:].clone())
        self.register_buffer("total", torch.ones(1, bins))


def _edges(unnormalized: torch.Tensor, tables: _SplineTables, bound: float, min_bin: float) -> torch.Tensor:
    """Bin edges from -bound to bound, ``[.., bins + 1]``, as `_rational_quadratic_spline` computes them."""
    bins = unnormalized.shape[-1]
    sizes = min_bin + (1 - min_bin * bins) * torch.softmax(unnormalized, dim=-1)
    edges = 2 * bound * functional.linear(sizes, tables.cumulative) - bound
    # transformers sets the last edge to exactly `bound`, where the sum of the sizes rounds near 1.
    return edges * (1.0 - tables.last_edge) + bound * tables.last_edge


def _inverse_spline(
    inputs: torch.Tensor,
    unnormalized_widths: torch.Tensor,
    unnormalized_heights: torch.Tensor,
    unnormalized_inner_derivatives: torch.Tensor,
    tables: _SplineTables,
    bound: float,
) -> torch.Tensor:
    """`_unconstrained_rational_quadratic_spline(reverse=True)`'s outputs for ``inputs [1, n, 1]`` and the flow's
    parameters: widths and heights ``[1, n, bins]``, the derivatives at the inner edges ``[1, n, bins - 1]``."""
    min_size = min_derivative = 1e-3
    # The outer derivatives are those of the identity outside the bound.
    end_derivative = float(np.log(np.exp(1 - min_derivative) - 1))
    unnormalized_derivatives = functional.pad(unnormalized_inner_derivatives, (1, 1), value=end_derivative)

    cumwidths = _edges(unnormalized_widths, tables, bound, min_size)
    cumheights = _edges(unnormalized_heights, tables, bound, min_size)
    widths = functional.linear(cumwidths, tables.difference)
    heights = functional.linear(cumheights, tables.difference)
    derivatives = min_derivative + _softplus(unnormalized_derivatives)

    # Inside the bound the spline; outside, the identity. The spline runs on the clamped inputs so that an
    # element outside stays finite where it is multiplied by 0.
    clamped = torch.clamp(inputs, -bound, bound)
    # transformers places the last edge 1e-6 above the bound, so an input at the bound falls in the last bin.
    reached = _at_least(clamped, cumheights + tables.last_edge * 1e-6)
    in_bin = functional.linear(reached, tables.lower_edges) - functional.linear(reached, tables.upper_edges)

    def at_bin(table: torch.Tensor) -> torch.Tensor:
        return functional.linear(table * in_bin, tables.total)

    input_cumwidths = at_bin(functional.linear(cumwidths, tables.lower_edges))
    input_cumheights = at_bin(functional.linear(cumheights, tables.lower_edges))
    input_widths = at_bin(widths)
    input_heights = at_bin(heights)
    input_delta = at_bin(heights / widths)
    input_derivatives = at_bin(functional.linear(derivatives, tables.lower_edges))
    input_derivatives_plus_one = at_bin(functional.linear(derivatives, tables.upper_edges))

    intermediate1 = input_derivatives + input_derivatives_plus_one - 2 * input_delta
    intermediate2 = clamped - input_cumheights
    intermediate3 = intermediate2 * intermediate1
    a = input_heights * (input_delta - input_derivatives) + intermediate3
    b = input_heights * input_derivatives - intermediate3
    c = -input_delta * intermediate2
    root = (2 * c) / (-b - torch.sqrt(b * b - 4 * a * c))
    spline = root * input_widths + input_cumwidths
    inside = _at_least(inputs, torch.full_like(inputs, -bound)) * _at_least(torch.full_like(inputs, bound), inputs)
    return inputs + inside * (spline - inputs)


def _reverse_conv_flow(
    flow: VitsConvFlow, tables: _SplineTables, first: torch.Tensor, second: torch.Tensor, conditioning: torch.Tensor
) -> torch.Tensor:
    """The second half of `VitsConvFlow.forward(reverse=True)`'s output (the first half passes through)."""
    states = flow.conv_pre(first)
    states = _dilated_convs(flow.conv_dds, states, conditioning)
    # Cut along the channels, where a cut is a channel selection (a 1x1 convolution) in the delegate.
    parameters = flow.conv_proj(states)  # [1, 3 bins - 1, n]
    bins, scale = flow.num_bins, 1 / math.sqrt(flow.filter_channels)
    widths = (parameters[:, :bins] * scale).transpose(1, 2)
    heights = (parameters[:, bins : 2 * bins] * scale).transpose(1, 2)
    derivatives = parameters[:, 2 * bins :].transpose(1, 2)
    transformed = _inverse_spline(second.transpose(1, 2), widths, heights, derivatives, tables, flow.tail_bound)
    return transformed.transpose(1, 2)


def _reverse_affine(affine: VitsElementwiseAffine, half: torch.Tensor, index: int) -> torch.Tensor:
    return (half - affine.translate[index]) * torch.exp(-affine.log_scale[index])


def _log_durations(
    predictor: VitsStochasticDurationPredictor,
    tables: _SplineTables,
    hidden: torch.Tensor,
    noise: torch.Tensor,
    speaker: torch.Tensor | None,
) -> torch.Tensor:
    """`VitsStochasticDurationPredictor.forward(reverse=True)` with its noise given: ``[1, 1, n]``."""
    states = predictor.conv_pre(hidden)
    if speaker is not None:
        states = states + predictor.cond(speaker)
    conditioning = predictor.conv_proj(_dilated_convs(predictor.conv_dds, states, None))
    # The flows' two channels are held apart: `torch.flip` of two channels swaps them.
    first, second = noise[:, :1], noise[:, 1:]
    flows = list(reversed(predictor.flows))
    # As transformers: the last conv flow is skipped in reverse ("a useless vflow").
    for flow in flows[:-2]:
        first, second = second, first
        second = _reverse_conv_flow(flow, tables, first, second, conditioning)
    first, second = second, first
    return _reverse_affine(flows[-1], first, 0)


class _Speakers(nn.Module):
    """A voice of several speakers' embedding table; the conditioning ``[1, C, 1]`` of a speaker index ``[1]``, as
    `VitsModel` gives its flows, duration predictor and decoder. Absent (None) for a single-speaker voice."""

    def __init__(self, model: VitsModel):
        super().__init__()
        self.embed_speaker = model.embed_speaker

    def forward(self, speaker_id: torch.Tensor) -> torch.Tensor:
        return self.embed_speaker(speaker_id)[..., None]


def _speakers(model: VitsModel) -> _Speakers | None:
    return _Speakers(model) if model.config.num_speakers > 1 else None


def _conditioning(speakers: _Speakers | None, speaker_id: torch.Tensor | None) -> torch.Tensor | None:
    if (speakers is None) != (speaker_id is None):
        raise TypeError("a voice of several speakers takes a speaker index, a voice of one takes none")
    return None if speakers is None or speaker_id is None else speakers(speaker_id)


class VitsTextToDurations(nn.Module):
    """``encode``: token ids ``[1, n]`` int64 and duration noise ``[1, 2, n]`` (unit normal times
    ``noise_scale_duration``), and for a voice of several speakers the speaker's index ``[1]`` int64 → prior means
    ``[1, n, C]``, prior log-variances ``[1, n, C]`` and log-durations ``[1, n]``."""

    def __init__(self, model: VitsModel):
        super().__init__()
        self.text_encoder = model.text_encoder
        self.duration_predictor = model.duration_predictor
        self.speakers = _speakers(model)
        self.window = model.config.window_size
        self.flow_size = model.config.flow_size
        self.tables = _SplineTables(model.config.duration_predictor_flow_bins)

    def forward(self, input_ids: torch.Tensor, duration_noise: torch.Tensor, speaker_id: torch.Tensor | None = None):
        encoder = self.text_encoder
        length = input_ids.shape[1]
        hidden = encoder.embed_tokens(input_ids) * math.sqrt(encoder.config.hidden_size)
        one_hot = _relative_one_hot(length, self.window, hidden)
        for layer in encoder.encoder.layers:
            hidden = _encoder_layer(layer, hidden, one_hot)
        statistics = encoder.project(hidden.transpose(1, 2))
        means = statistics[:, : self.flow_size].transpose(1, 2)
        log_variances = statistics[:, self.flow_size :].transpose(1, 2)
        speaker = _conditioning(self.speakers, speaker_id)
        log_durations = _log_durations(
            self.duration_predictor, self.tables, hidden.transpose(1, 2), duration_noise, speaker
        )
        return means, log_variances, log_durations[:, 0]


class VitsLatentsToWaveform(nn.Module):
    """``decode``: prior latents ``[1, frames, C]`` (the expanded prior with its noise), and for a voice of several
    speakers the speaker's index ``[1]`` int64 → waveform ``[1, frames * hop]``, through the reverse flow and the
    HiFi-GAN."""

    def __init__(self, model: VitsModel):
        super().__init__()
        self.flow = model.flow
        self.decoder = model.decoder
        self.speakers = _speakers(model)

    def forward(self, latents: torch.Tensor, speaker_id: torch.Tensor | None = None) -> torch.Tensor:
        speaker = _conditioning(self.speakers, speaker_id)
        latents = latents.transpose(1, 2)
        mask = torch.ones_like(latents[:, :1])
        return self.decoder(self.flow(latents, mask, speaker, reverse=True), speaker)[:, 0]
