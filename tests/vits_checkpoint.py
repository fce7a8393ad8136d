"""A VITS voice as transformers saves one (`VitsModel` and `VitsTokenizer` save_pretrained into one directory), at
test size, with weights that make its durations and flows do something."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from audiodeploy.program.tts import TextFrontEnd, TextToSpeech

# An MMS-TTS-like character vocabulary: id 0 (the blank the tokenizer intersperses) is a letter, as in MMS-TTS.
CHARACTERS = ("k", "'", "|", "t", "m", "d", "z", "e", "x", "r", "y", "3", "c", "w", "-", "1", "q", "u", "h", " ")
CHARACTERS += ("f", "l", "n", "0", "b", "i", "a", "2", "4", "v", "_", "o", "s", "p", "j", "5", "6", "g")

# A phoneme voice's vocabulary, as the original VITS's (LJSpeech, VCTK) lays it out: the blank, punctuation and the
# space, Latin letters, then IPA letters, stress and length marks.
PHONEMES = tuple(
    dict.fromkeys(
        "_"
        + ';:,.!?¡¿—…"«»“” '
        + "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
        + "ɑɐɒæɓʙβɔɕçɗɖðʤəɘɚɛɜɝɞɟʄɡɠɢʛɦɧħɥʜɨɪʝɭɬɫɮʟɱɯɰŋɳɲɴøɵɸθœɶʘɹɺɾɻʀʁɽʂʃʈʧʉʊʋⱱʌɣɤʍχʎʏʑʐʒʔʡʕʢǀǁǂǃˈˌːˑʼʴʰʱʲʷˠˤ˞↓↑→↗↘'̩ᵻ"
    )
)


def text_to_speech(characters: tuple[str, ...] = ("_", "a", "b"), **changes: Any) -> TextToSpeech:
    """A sidecar's ``model.text`` with transformers' `VitsConfig` defaults, for tests of the host's part alone."""
    front_end = TextFrontEnd(characters=characters, lowercase=True, add_blank=True, origin="the test's vocabulary")
    fields: dict[str, Any] = {"min_tokens": 2, "max_tokens": 9, "flow_size": 32, "noise_scale": 0.667}
    fields |= {"noise_scale_duration": 0.8, "speaking_rate": 1.0}
    return TextToSpeech(front_end=front_end, **(fields | changes))


def write_vits_checkpoint(directory: Path, *, phonemize: bool = False, speakers: int = 1) -> Path:
    """A tiny VITS voice of `speakers` speakers in `directory`: config.json, model.safetensors, vocab.json and
    tokenizer_config.json; a voice of `PHONEMES` that reads espeak's IPA with `phonemize`."""
    from transformers import VitsConfig, VitsModel, VitsTokenizer

    vocabulary = PHONEMES if phonemize else CHARACTERS
    torch.manual_seed(1)
    config = VitsConfig(
        vocab_size=len(vocabulary),
        hidden_size=32,
        num_hidden_layers=1,
        ffn_dim=64,
        flow_size=32,
        spectrogram_bins=33,
        upsample_initial_channel=32,
        upsample_rates=[16, 16],
        upsample_kernel_sizes=[32, 32],
        resblock_kernel_sizes=[3, 5],
        resblock_dilation_sizes=[[1, 3], [1, 3]],
        prior_encoder_num_wavenet_layers=2,
        posterior_encoder_num_wavenet_layers=2,
        duration_predictor_filter_channels=32,
        duration_predictor_num_flows=2,
        depth_separable_num_layers=2,
        num_speakers=speakers,
        speaker_embedding_size=16 if speakers > 1 else 0,
    )
    model = VitsModel(config).eval()
    with torch.no_grad():
        # transformers starts the flows' affine layers at zero and small convolutions: move them, so that the
        # durations' spline and the flows change what they are given.
        for name, parameter in model.named_parameters():
            if "duration_predictor" in name or "flow" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    model.save_pretrained(directory)
    vocab = directory / "vocab.json"
    vocab.write_text(json.dumps({character: index for index, character in enumerate(vocabulary)}))
    tokenizer = VitsTokenizer(str(vocab), language="eng", add_blank=True, normalize=True, phonemize=phonemize)
    tokenizer.save_pretrained(directory)
    return directory
