"""What the wav2vec2-style speech encoders share: the architecture, the CTC wrappers, building from either library.

wav2vec2, HuBERT and WavLM, and the transformers-only UniSpeech, UniSpeech-SAT, data2vec-audio, SEW and SEW-D, are
one architecture with small differences: a strided convolutional feature encoder, a transformer with a positional
convolution (weight-normalized but in data2vec-audio), and a linear CTC head. transformers (`*ForCTC`) and
torchaudio (`wav2vec2_model`, `wavlm_model`) implement it with different parameter names;
`SpeechEncoderArchitecture` names every hyperparameter once and says what each library calls it.

Declaring a family imports neither library nor torch: the build imports them, and the export wrappers from
`_modules`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from audiodeploy.program.spec import (
    CLASS_LOGITS_OUTPUT,
    EMBEDDING_OUTPUT,
    FRAME_CLASS_LOGITS_OUTPUT,
    HIDDEN_STATES_OUTPUT,
    OutputSpec,
)
from audiodeploy.program.vocabulary import STANDARD_ENGLISH, TORCHAUDIO_ENGLISH, CtcVocabulary

from ._checkpoints import load_payload
from ._transformers import (
    load_pretrained,
    locate,
    optional_file,
    read_config,
    refuse_incomplete,
    refuse_other_model_type,
    register_unpadded_eager_attention,
    transformers_class,
    transformers_class_exists,
)
from .errors import WeightsError
from .registry import Recipe
from .spec import (
    CTC_LOGITS_OUTPUT,
    BuildRequest,
    BuiltHead,
    BuiltModel,
    LengthRange,
    Variant,
    synthetic_provenance,
    tiny_variant,
    waveform_input,
)

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel

SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class ConvLayer:
    """One layer of the convolutional feature encoder: (output channels, kernel size, stride)."""

    channels: int
    kernel: int
    stride: int


# fairseq's `conv_feature_layers` default "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512, 2, 2)] * 2", used by every
# published checkpoint here: 25 ms receptive field, 20 ms (320 samples) stride at 16 kHz.
STANDARD_FEATURE_ENCODER: tuple[ConvLayer, ...] = (
    (ConvLayer(512, 10, 5),) + (ConvLayer(512, 3, 2),) * 4 + (ConvLayer(512, 2, 2),) * 2
)


@dataclass(frozen=True)
class SpeechEncoderArchitecture:
    """Every hyperparameter of a wav2vec2-style CTC model that changes its computation in eval mode.

    Dropouts and layer drop are training-only and left at the libraries' defaults.
    """

    feature_encoder: tuple[ConvLayer, ...]
    """transformers `conv_dim`/`conv_kernel`/`conv_stride`; torchaudio `extractor_conv_layer_config`."""
    feature_encoder_norm: Literal["group", "layer"]
    """transformers `feat_extract_norm`; torchaudio `extractor_mode` ("group_norm" or "layer_norm")."""
    feature_encoder_bias: bool
    """transformers `conv_bias`; torchaudio `extractor_conv_bias`."""
    hidden_size: int
    """transformers `hidden_size`; torchaudio `encoder_embed_dim`."""
    num_layers: int
    """transformers `num_hidden_layers`; torchaudio `encoder_num_layers`."""
    num_heads: int
    """transformers `num_attention_heads`; torchaudio `encoder_num_heads`."""
    intermediate_size: int
    """transformers `intermediate_size`; torchaudio `encoder_ff_interm_features`."""
    pos_conv_kernel: int
    """transformers `num_conv_pos_embeddings`; torchaudio `encoder_pos_conv_kernel`."""
    pos_conv_groups: int
    """transformers `num_conv_pos_embedding_groups`; torchaudio `encoder_pos_conv_groups`."""
    layer_norm_first: bool
    """Pre-norm transformer: transformers `do_stable_layer_norm`; torchaudio `encoder_layer_norm_first`."""
    vocab_size: int
    """Outputs of the CTC head: transformers `vocab_size`; torchaudio `aux_num_out`."""
    normalize_waveform: bool
    """Zero-mean, unit-variance input: `do_normalize` of the checkpoint's preprocessor_config.json."""
    relative_position_buckets: int | None = None
    """WavLM: transformers `num_buckets`, torchaudio `encoder_num_buckets`; SEW-D: transformers `position_buckets`."""
    relative_position_max_distance: int | None = None
    """WavLM: transformers `max_bucket_distance`, torchaudio `encoder_max_distance`; SEW-D: transformers
    `max_position_embeddings`."""
    pos_conv_depth: int | None = None
    """data2vec-audio only: the positional convolution is a stack of this many plain convolutions of kernel
    `pos_conv_kernel`, each followed by a layer norm without parameters (transformers `num_conv_pos_embeddings`, its
    kernel `conv_pos_kernel_size`; fairseq `pos_conv_depth`); None for the one weight-normalized convolution."""
    squeeze_factor: int | None = None
    """SEW and SEW-D only: the transformer runs on frames average-pooled by this factor, and a linear layer
    upsamples its output back (transformers `squeeze_factor`); None for the full frame rate."""
    position_embeddings: Literal["rotary", "relative"] | None = None
    """wav2vec2-conformer only: the conformer blocks' attention rotates queries and keys ("rotary") or adds a
    Transformer-XL relative position bias ("relative") (transformers `position_embeddings_type`); None elsewhere."""

    @property
    def stride(self) -> int:
        """Samples per output frame: the product of the feature encoder's strides."""
        return math.prod(layer.stride for layer in self.feature_encoder)

    def tiny(self) -> SpeechEncoderArchitecture:
        """The same layout at test size: every layer kind and stride kept, widths and depth cut down.

        The strides stay those of the published model, so the valid input lengths (multiples of 320 samples)
        are the same as at full size. The positional kernel keeps its parity: an even one (wav2vec2's 128) drops
        the convolution's last output frame, an odd one (SEW's 31, data2vec-audio's 19) does not.
        """
        return replace(
            self,
            feature_encoder=tuple(ConvLayer(32, layer.kernel, layer.stride) for layer in self.feature_encoder),
            hidden_size=32,
            num_layers=2,
            num_heads=2,
            intermediate_size=64,
            pos_conv_kernel=8 if self.pos_conv_kernel % 2 == 0 else 7,
            pos_conv_groups=2,
        )


# The two sizes of fairseq's wav2vec 2.0, which HuBERT and WavLM kept: every published variant of the three
# families is one of them with the fields its config.json changes (the family modules say which and why).
BASE_ENCODER = SpeechEncoderArchitecture(
    feature_encoder=STANDARD_FEATURE_ENCODER,
    feature_encoder_norm="group",
    feature_encoder_bias=False,
    hidden_size=768,
    num_layers=12,
    num_heads=12,
    intermediate_size=3072,
    pos_conv_kernel=128,
    pos_conv_groups=16,
    layer_norm_first=False,
    vocab_size=32,
    normalize_waveform=True,
)
"""Base size, 94 M parameters: a post-norm transformer after a group-normalized feature encoder
(facebook/wav2vec2-base-960h; torchaudio `wav2vec2_base`)."""

LARGE_ENCODER = replace(
    BASE_ENCODER,
    feature_encoder_norm="layer",
    hidden_size=1024,
    num_layers=24,
    num_heads=16,
    intermediate_size=4096,
    layer_norm_first=True,
)
"""Large size, 315 M parameters, in the layout of the large checkpoints pre-trained on Libri-Light and later: a
pre-norm transformer after a layer-normalized feature encoder (transformers `do_stable_layer_norm`;
facebook/hubert-large-ls960-ft, microsoft/wavlm-large; torchaudio `hubert_large`)."""


def tiny_encoder_variant(name: str, of: Variant[SpeechEncoderArchitecture]) -> Variant[SpeechEncoderArchitecture]:
    """A hidden test-size variant with the layout of the published variant `of`."""
    return tiny_variant(
        name, of, f"test size (hidden 32, 2 layers, 2 heads) with the layout of '{of.name}' ({of.checkpoint})"
    )


def transformers_config_arguments(architecture: SpeechEncoderArchitecture) -> dict[str, Any]:
    """The keys of `architecture` that `Wav2Vec2Config`, `HubertConfig` and `WavLMConfig` share (and
    `UniSpeechConfig`, `UniSpeechSatConfig`); a family adds its own keys or drops those its config does not take,
    and everything else keeps the library default."""
    return {
        "vocab_size": architecture.vocab_size,
        "hidden_size": architecture.hidden_size,
        "num_hidden_layers": architecture.num_layers,
        "num_attention_heads": architecture.num_heads,
        "intermediate_size": architecture.intermediate_size,
        "feat_extract_norm": architecture.feature_encoder_norm,
        "conv_dim": tuple(layer.channels for layer in architecture.feature_encoder),
        "conv_kernel": tuple(layer.kernel for layer in architecture.feature_encoder),
        "conv_stride": tuple(layer.stride for layer in architecture.feature_encoder),
        "conv_bias": architecture.feature_encoder_bias,
        "num_conv_pos_embeddings": architecture.pos_conv_kernel,
        "num_conv_pos_embedding_groups": architecture.pos_conv_groups,
        "do_stable_layer_norm": architecture.layer_norm_first,
    }


def torchaudio_model_arguments(architecture: SpeechEncoderArchitecture, num_outputs: int) -> dict[str, Any]:
    """The arguments of `architecture` that torchaudio's `wav2vec2_model` and `wavlm_model` share, with a CTC
    head (`aux`) of `num_outputs` labels; a family adds its own arguments.

    Dropouts are 0: they only act in training, and the module is built for inference.
    """
    return {
        "extractor_mode": f"{architecture.feature_encoder_norm}_norm",
        "extractor_conv_layer_config": [
            (layer.channels, layer.kernel, layer.stride) for layer in architecture.feature_encoder
        ],
        "extractor_conv_bias": architecture.feature_encoder_bias,
        "encoder_embed_dim": architecture.hidden_size,
        "encoder_projection_dropout": 0.0,
        "encoder_pos_conv_kernel": architecture.pos_conv_kernel,
        "encoder_pos_conv_groups": architecture.pos_conv_groups,
        "encoder_num_layers": architecture.num_layers,
        "encoder_num_heads": architecture.num_heads,
        "encoder_attention_dropout": 0.0,
        "encoder_ff_interm_features": architecture.intermediate_size,
        "encoder_ff_interm_dropout": 0.0,
        "encoder_dropout": 0.0,
        "encoder_layer_norm_first": architecture.layer_norm_first,
        "encoder_layer_drop": 0.0,
        "aux_num_out": num_outputs,
    }


# `int8_keep_fp32` of a variant whose later feature-encoder convolutions are sensitive too: every convolution
# of the feature encoder and the CTC head stay fp32 (the recipe's default keeps only the first convolution).
WHOLE_FEATURE_ENCODER_KEEP_FP32 = MappingProxyType(
    {
        "transformers": ("*.feature_extractor.*", "*.lm_head"),
        "torchaudio": ("*.feature_extractor.*", "*.aux"),
    }
)


@dataclass(frozen=True)
class EncoderHead:
    """A head a transformers speech-encoder checkpoint carries, named by the suffix of its class: what the program
    outputs with it."""

    name: str
    class_suffix: str
    """E.g. "ForSequenceClassification": the family's prefix ("Wav2Vec2") and this name the transformers class."""
    output_name: str
    """The field of the model's output the program returns."""
    output: OutputSpec
    keep_fp32: tuple[str, ...]
    """The head's GEMMs kept fp32 by default when quantized, beside the feature encoder's first convolution: the
    output layers, as the CTC head's ``lm_head``."""


CTC_HEAD = EncoderHead("ctc", "ForCTC", "logits", CTC_LOGITS_OUTPUT, ("*.lm_head",))
ENCODER_HEADS = (
    CTC_HEAD,
    EncoderHead(
        "sequence-classification",
        "ForSequenceClassification",
        "logits",
        CLASS_LOGITS_OUTPUT,
        ("*.projector", "*.classifier"),
    ),
    EncoderHead(
        "frame-classification", "ForAudioFrameClassification", "logits", FRAME_CLASS_LOGITS_OUTPUT, ("*.classifier",)
    ),
    EncoderHead("xvector", "ForXVector", "embeddings", EMBEDDING_OUTPUT, ()),
    EncoderHead("features", "Model", "last_hidden_state", HIDDEN_STATES_OUTPUT, ()),
)
"""The heads `export --weights` builds from a checkpoint, as its config.json's ``architectures`` names them."""

_PRETRAINING_SUFFIX = "ForPreTraining"
"""A pre-training checkpoint (quantizer and projections for the contrastive task): exported as its features."""


def head_of_checkpoint(config: Mapping[str, object], weights: str, prefix: str) -> EncoderHead:
    """The head of a checkpoint of the family whose transformers classes start with `prefix`, from the
    ``architectures`` its config.json lists (the CTC head when it lists none); `WeightsError` naming the heads
    there are for an architecture of this family without one."""
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list) or not architectures:
        return CTC_HEAD
    for architecture in architectures:
        if architecture == prefix + _PRETRAINING_SUFFIX:
            return next(head for head in ENCODER_HEADS if head.name == "features")
        for head in ENCODER_HEADS:
            if architecture == prefix + head.class_suffix and transformers_class_exists(architecture):
                return head
    supported = ", ".join(
        prefix + head.class_suffix for head in ENCODER_HEADS if transformers_class_exists(prefix + head.class_suffix)
    )
    raise WeightsError(
        f"weights '{weights}' hold a {', '.join(map(str, architectures))}, which audiodeploy does not export: "
        f"it exports {supported}"
    )


@dataclass(frozen=True)
class _Loaded:
    """A library model as built or loaded, before `_build` wraps it for export."""

    model: nn.Module
    normalize_waveform: bool
    stride: int
    vocabulary: CtcVocabulary | None
    """The CTC head's labels; None for the other heads."""
    provenance: str
    notes: tuple[str, ...]
    head: EncoderHead = CTC_HEAD
    labels: tuple[str, ...] | None = None
    """A classifier's label names by index (its config's ``id2label``)."""


class SpeechEncoderRecipe(Recipe[SpeechEncoderArchitecture]):
    """Shared build logic of the CTC speech recognizers; a family declares its variants and library classes."""

    task = "ctc-asr"
    input_kind = "waveform"
    output = CTC_LOGITS_OUTPUT
    sample_rate = SAMPLE_RATE
    default_length_range = LengthRange(1.0, 10.0)
    # Logits of fp32 XNNPACK against eager PyTorch: summation order differs in every GEMM of up to 24 layers.
    atol = 1e-3
    # int8-dynamic: int8 weights, activations quantized per call. Tiny models of all three families and both
    # sources, default keep_fp32: one delegate, no GEMM outside (WavLM keeps two slice_copy outside); see
    # tests/recipes/test_quantized.py for the bar.
    # int8-static, calibrated on six speech-like files, HuBERT tiny: one delegate, nothing outside, 36.8 dB and
    # 99.2% on held-out speech-like audio (measured once; tests/recipes/test_quantized.py tests int8-dynamic only).
    int8_schemes: tuple[str, ...] = ("int8-dynamic", "int8-static")
    # Kept fp32 by default: the first convolution, on raw samples, and the CTC head, as users who found int8
    # doubling the error rate of speech models came to. Measured per GEMM (`export --sensitivity`, tiny
    # wav2vec2), the first convolution is the most sensitive (35.9 dB alone); the other feature-encoder
    # convolutions follow within 1.7 dB, and keeping them too (17 MB of fp32 weights at base size) costs the
    # 0.3x program size: base wav2vec2 with them 116 MiB (0.32x), logits SNR 33.2 dB; without them 0.26x,
    # 29-30 dB, against ONNX Runtime int8's 25-26 dB (benchmarks/results/*-int8.json). The export wrapper's
    # module paths differ by source: transformers `model.<family>.feature_extractor.conv_layers.N.conv` and
    # `model.lm_head`; torchaudio `model.feature_extractor.conv_layers.N.conv` and `model.aux`. WavLM large
    # measured more sensitive and keeps the whole feature encoder (recipes/wavlm.py).
    int8_keep_fp32 = MappingProxyType(
        {
            "transformers": ("*.feature_extractor.conv_layers.0.*", "*.lm_head"),
            "torchaudio": ("*.feature_extractor.conv_layers.0.*", "*.aux"),
        }
    )

    transformers_model_type: str
    """`model_type` of the family's config.json; weights of another type are refused."""
    transformers_model_class_name: str
    """The family's `*ForCTC` class in transformers, e.g. "Wav2Vec2ForCTC" (see `transformers_model_class`)."""
    transformers_attention: str | None
    """attn_implementation to build with, or None when the family's attention ignores the setting (WavLM, SEW-D)."""

    @property
    def transformers_model_class(self) -> type[PreTrainedModel]:
        """The class `transformers_model_class_name` names; importing transformers happens here."""
        return transformers_class(self.transformers_model_class_name)

    @property
    def transformers_class_prefix(self) -> str:
        """The family's prefix of transformers class names: "Wav2Vec2" of "Wav2Vec2ForCTC"."""
        return self.transformers_model_class_name.removesuffix(CTC_HEAD.class_suffix)

    def checkpoint_head(self, config: Mapping[str, object], weights: str) -> EncoderHead:
        """The head of a checkpoint, from the ``architectures`` its config.json lists (the CTC head when it lists
        none); `WeightsError` naming the heads there are for an architecture of this family without one."""
        refuse_other_model_type(dict(config), weights, self.transformers_model_type, self.name)
        return head_of_checkpoint(config, weights, self.transformers_class_prefix)

    def transformers_config(self, architecture: SpeechEncoderArchitecture) -> PretrainedConfig:
        """The transformers config of `architecture`: the family's config class (`config_class` of its model
        class) with the shared keys (`transformers_config_arguments`). A family with keys of its own overrides this."""
        return self.transformers_model_class.config_class(**transformers_config_arguments(architecture))

    def exportable(self, model: nn.Module) -> nn.Module:
        """The transformers `model`, built or loaded, made fit for `torch.export` over the whole length range: by
        default `model` itself. A family whose modeling code branches on the number of frames overrides this
        (SEW, SEW-D); the parameters and their names stay those of the checkpoint."""
        return model

    def torchaudio_model(self, architecture: SpeechEncoderArchitecture, num_outputs: int) -> nn.Module:
        """The torchaudio model of `architecture` with a CTC head of `num_outputs` labels: torchaudio's general
        `wav2vec2_model`, which builds wav2vec2 and HuBERT (`hubert_base`/`hubert_large` are presets of it).
        A family with another torchaudio builder overrides this."""
        from torchaudio.models import wav2vec2_model

        return wav2vec2_model(**torchaudio_model_arguments(architecture, num_outputs))

    def _build(self, request: BuildRequest[SpeechEncoderArchitecture]) -> BuiltModel:
        if request.source == "transformers" and request.weights is not None:
            locate(request.weights)  # a mistyped path is refused before transformers is imported (seconds)
        from ._modules import TorchaudioCtc, TransformersEncoder

        if request.source == "transformers":
            # `transformers_attention` may name it; transformers looks it up when the model is built.
            register_unpadded_eager_attention()
        if request.weights is None:
            loaded = self._synthetic(request)
        elif request.source == "transformers":
            loaded = self._from_transformers(request, request.weights)
        else:
            loaded = self._from_torchaudio(request, request.weights)
        module: nn.Module
        if request.source == "transformers":
            module = TransformersEncoder(
                self.exportable(loaded.model), loaded.normalize_waveform, loaded.head.output_name
            )
        else:
            module = TorchaudioCtc(loaded.model, loaded.normalize_waveform)
        spec = waveform_input(self.sample_rate, loaded.stride, request.length_range)
        head = None if loaded.head is CTC_HEAD else self._built_head(request, loaded)
        return self._package(
            request, module, spec, loaded.provenance, loaded.notes, vocabulary=loaded.vocabulary, head=head
        )

    def _built_head(self, request: BuildRequest[SpeechEncoderArchitecture], loaded: _Loaded) -> BuiltHead:
        """A checkpoint's head other than CTC: its output, labels, and the recipe's keep-fp32 patterns with the CTC
        head's replaced by this head's."""
        body = tuple(
            pattern
            for pattern in self.default_keep_fp32(request.source, request.variant.name)
            if pattern not in CTC_HEAD.keep_fp32
        )
        return BuiltHead(output=loaded.head.output, labels=loaded.labels, keep_fp32=body + loaded.head.keep_fp32)

    def _synthetic(self, request: BuildRequest[SpeechEncoderArchitecture]) -> _Loaded:
        import torch

        architecture = request.variant.architecture
        torch.manual_seed(request.seed)
        model: nn.Module
        if request.source == "transformers":
            model = self.transformers_model_class(self.transformers_config(architecture))
            if self.transformers_attention is not None:
                model.set_attn_implementation(self.transformers_attention)
        else:
            model = self.torchaudio_model(architecture, architecture.vocab_size)
        return _Loaded(
            model=model,
            normalize_waveform=architecture.normalize_waveform,
            stride=architecture.stride,
            vocabulary=STANDARD_ENGLISH,
            provenance=synthetic_provenance(request.variant, request.seed),
            notes=(),
        )

    def _from_transformers(self, request: BuildRequest[SpeechEncoderArchitecture], weights: str) -> _Loaded:
        architecture = request.variant.architecture
        head = self.checkpoint_head(read_config(weights), weights)
        model_class = transformers_class(self.transformers_class_prefix + head.class_suffix)
        model, missing = load_pretrained(
            model_class,
            weights,
            self.transformers_model_type,
            self.name,
            self.transformers_attention,
            request.seed,
        )
        notes: list[str] = []
        body_missing = [key for key in missing if not (head is CTC_HEAD and key.startswith("lm_head."))]
        refuse_incomplete(weights, body_missing, model_class, self.transformers_model_type)
        if missing:
            # A CTC checkpoint without its head (config.json lists no architecture): the head is synthetic.
            notes.append(f"the checkpoint has no CTC head: lm_head is synthetic (seed {request.seed})")
        config = model.config
        normalize = _preprocessor_normalizes(weights, default=architecture.normalize_waveform)
        labels = None
        if head.output.task in ("audio-classification", "audio-frame-classification"):
            labels = tuple(str(config.id2label[index]) for index in range(config.num_labels))
        return _Loaded(
            model=model,
            normalize_waveform=normalize,
            stride=math.prod(config.conv_stride),
            vocabulary=_tokenizer_vocabulary(weights, config.vocab_size) if head is CTC_HEAD else None,
            provenance=f"loaded from {weights} (transformers {model_class.__name__})",
            notes=tuple(notes),
            head=head,
            labels=labels,
        )

    def _from_torchaudio(self, request: BuildRequest[SpeechEncoderArchitecture], weights: str) -> _Loaded:
        import torch

        architecture = request.variant.architecture
        state = _read_state_dict(weights)
        head = state.get("aux.weight")
        num_outputs = architecture.vocab_size if head is None else int(head.shape[0])
        vocabulary = _vocabulary_for_outputs(num_outputs, weights)
        torch.manual_seed(request.seed)
        model = self.torchaudio_model(architecture, num_outputs)
        try:
            missing, unexpected = model.load_state_dict(state, strict=False)
        except RuntimeError as error:
            raise WeightsError(
                f"state dict {weights} does not fit torchaudio {self.name} '{request.variant.name}' "
                f"(tensor shapes differ: {str(error).splitlines()[-1].strip()}): choose the variant it was trained as"
            ) from None
        body_missing = [key for key in missing if not key.startswith("aux.")]
        if body_missing or unexpected:
            example = (body_missing or unexpected)[0]
            raise WeightsError(
                f"state dict {weights} does not fit torchaudio {self.name} '{request.variant.name}': "
                f"{len(body_missing)} missing and {len(unexpected)} unexpected keys (e.g. {example}): "
                "choose the variant it was trained as"
            )
        notes = (f"the state dict has no CTC head: aux is synthetic (seed {request.seed})",) if missing else ()
        return _Loaded(
            model=model,
            normalize_waveform=architecture.normalize_waveform,
            stride=architecture.stride,
            vocabulary=vocabulary,
            provenance=f"loaded from {weights} (torchaudio state dict, '{request.variant.name}' configuration)",
            notes=notes,
        )


TRANSFORMERS_ONLY_KEEP_FP32 = MappingProxyType({"transformers": SpeechEncoderRecipe.int8_keep_fp32["transformers"]})
"""`int8_keep_fp32` of a family built from transformers only (the registry refuses patterns for a source a recipe
does not have): the same default, the first convolution and the CTC head."""


def _preprocessor_normalizes(weights: str, default: bool) -> bool:
    path = optional_file(weights, "preprocessor_config.json")
    if path is None:
        return default
    with open(path, encoding="utf-8") as file:
        return bool(json.load(file).get("do_normalize", default))


def _tokenizer_vocabulary(weights: str, num_outputs: int) -> CtcVocabulary:
    """The vocabulary of the tokenizer beside the weights, or the standard English one when there is none."""
    if optional_file(weights, "vocab.json") is None:
        if num_outputs != len(STANDARD_ENGLISH):
            raise WeightsError(
                f"weights '{weights}' have a CTC head of {num_outputs} labels and no tokenizer (vocab.json): "
                "save the tokenizer beside the model so its outputs can be decoded"
            )
        return STANDARD_ENGLISH
    from transformers import Wav2Vec2CTCTokenizer

    tokenizer = Wav2Vec2CTCTokenizer.from_pretrained(weights)
    if len(tokenizer) < num_outputs:
        raise WeightsError(
            f"the tokenizer in '{weights}' has {len(tokenizer)} tokens but the CTC head has {num_outputs} outputs: "
            "save the tokenizer the model was trained with"
        )
    # Tokens past the head (special tokens the tokenizer appends, such as <s> and </s>) are never emitted.
    tokens = tuple(tokenizer.convert_ids_to_tokens(list(range(num_outputs))))
    keep = {tokenizer.pad_token, tokenizer.word_delimiter_token}
    special = tuple(token for token in tokenizer.all_special_tokens if token in tokens and token not in keep)
    return CtcVocabulary(
        tokens=tokens,
        blank=tokenizer.pad_token,
        word_delimiter=tokenizer.word_delimiter_token,
        special=special,
        origin=f"tokenizer in {weights}",
    )


def _vocabulary_for_outputs(num_outputs: int, weights: str) -> CtcVocabulary:
    # A torchaudio state dict carries no labels; the two English label sets are told apart by their size.
    if num_outputs == len(STANDARD_ENGLISH):
        return STANDARD_ENGLISH
    if num_outputs == len(TORCHAUDIO_ENGLISH):
        return TORCHAUDIO_ENGLISH
    raise WeightsError(
        f"state dict {weights} has a CTC head of {num_outputs} labels; only the English vocabularies of "
        f"{len(STANDARD_ENGLISH)} (transformers) and {len(TORCHAUDIO_ENGLISH)} (torchaudio bundles) labels are known: "
        "load it through --source transformers with its tokenizer instead"
    )


def _read_state_dict(weights: str) -> dict[str, torch.Tensor]:
    import torch

    path = Path(weights).expanduser()
    if path.is_dir():
        raise WeightsError(
            f"weights {weights} is a directory, but source 'torchaudio' loads a state-dict file "
            "(a save_pretrained() directory needs --source transformers)"
        )
    if not path.is_file():
        raise WeightsError(f"weights {weights} not found: no such file")
    state = load_payload(path)
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise WeightsError(f"{weights} is not a state dict (a mapping of parameter names to tensors)")
    return state
