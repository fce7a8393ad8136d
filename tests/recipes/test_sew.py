"""SEW and SEW-D: their published layouts, and the encoder forward that holds for either parity of the frame
count (the checks every speech encoder passes are in test_speech_encoders.py)."""

from __future__ import annotations

import pytest
import torch

from audiodeploy import recipes
from audiodeploy.recipes._squeezed_encoders import ExportableSEWDEncoder, ExportableSEWEncoder


def test_published_layouts():
    sew, sew_d = recipes.get("sew"), recipes.get("sew-d")
    tiny = sew.variant("tiny-100k").architecture
    # WFE-C: 13 convolutions widening from 64 to 512 channels, 320 samples per frame.
    assert [layer.channels for layer in tiny.feature_encoder] == [64] + [128] * 4 + [256] * 4 + [512] * 4
    assert [layer.kernel for layer in tiny.feature_encoder] == [10, 3, 1, 3, 1, 3, 1, 3, 1, 2, 1, 2, 1]
    assert tiny.stride == 320 and tiny.squeeze_factor == 2 and tiny.pos_conv_kernel == 31
    base_plus = sew_d.variant("base-plus-400k").architecture
    assert base_plus.feature_encoder[-1].channels == base_plus.hidden_size == 768
    config = sew_d.transformers_config(sew_d.variant("tiny-100k").architecture)
    assert (config.position_buckets, config.max_position_embeddings, config.squeeze_factor) == (256, 512, 2)
    assert tuple(config.pos_att_type) == ("p2c", "c2p") and config.hidden_size == 384
    assert sew.variant("tiny").architecture.pos_conv_kernel == 7  # odd, as the published 31


@pytest.mark.parametrize(("family", "exportable"), [("sew", ExportableSEWEncoder), ("sew-d", ExportableSEWDEncoder)])
def test_the_encoder_computes_what_transformers_does_for_either_parity_of_the_frame_count(family, exportable):
    built = recipes.get(family).build("tiny")
    encoder = built.module.model.base_model.encoder
    assert type(encoder) is exportable
    for length in (16_000, 16_320):  # 49 and 50 frames: the pooling leaves a frame over or not
        inputs = built.random_inputs(length, seed=1)
        with torch.no_grad():
            ours = built.module(*inputs)
            encoder.__class__ = exportable.__base__  # transformers' own encoder, same module
            try:
                theirs = built.module(*inputs)
            finally:
                encoder.__class__ = exportable
        assert ours.shape == (1, length // 320 - 1, 32)
        assert torch.equal(ours, theirs)
