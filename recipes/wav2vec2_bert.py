"""w2v-BERT 2.0 speech recognition (transformers `Wav2Vec2BertForCTC`, model_type "wav2vec2-bert").

Unlike the wav2vec2 family it takes no waveform: its input is 80-bin Kaldi-style log-mel filterbanks stacked in
pairs (160 features every 20 ms), computed by the model-free `audiodeploy.program.mel.Fbank` (transformers'
`SeamlessM4TFeatureExtractor`), which the sidecar records so that the runtime computes them from audio. The
extractor's per-utterance normalization of each mel bin runs inside the program (`_modules.FbankEncoder`).

The encoder is a conformer: a linear feature projection, 24 blocks of feed-forward, self-attention with
relative-key positions (distances clamped to 64 left and 8 right), a depthwise convolution and a second
feed-forward, then an optional adapter (strided convolutions and attention that halve the frame rate per layer)
and the CTC head. Variants copy facebook/w2v-bert-2.0's config.json, the pre-trained model every published
wav2vec2-bert CTC checkpoint is fine-tuned from, with a CTC head of the standard English characters; `base-adapter`
adds the one adapter layer that transformers' fine-tuning guide ("Fine-tune W2V2-Bert for low-resource ASR")
and the checkpoints made with it add (`add_adapter=True`: one output frame per 40 ms).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from audiodeploy.program.mel import Fbank
from audiodeploy.program.vocabulary import STANDARD_ENGLISH

from ._speech_encoder import (
    CTC_HEAD,
    SAMPLE_RATE,
    EncoderHead,
    _tokenizer_vocabulary,
    head_of_checkpoint,
)
from ._transformers import load_pretrained, read_config, refuse_incomplete, transformers_class
from .registry import Recipe, register
from .spec import (
    CTC_LOGITS_OUTPUT,
    BuildRequest,
    BuiltHead,
    BuiltModel,
    LengthRange,
    Variant,
    fbank_input,
    synthetic_provenance,
    tiny_variant,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

FBANK = Fbank.seamless_m4t()
"""`SeamlessM4TFeatureExtractor()`'s defaults, which facebook/w2v-bert-2.0's preprocessor_config.json keeps."""


@dataclass(frozen=True)
class Wav2Vec2BertArchitecture:
    """Every hyperparameter of a wav2vec2-bert CTC model that changes its computation in eval mode (transformers'
    `Wav2Vec2BertConfig` names in each docstring); dropouts and layer drop are training-only."""

    hidden_size: int
    """`hidden_size`."""
    num_layers: int
    """`num_hidden_layers`: conformer blocks."""
    num_heads: int
    """`num_attention_heads`."""
    intermediate_size: int
    """`intermediate_size`: the feed-forward modules' width."""
    depthwise_kernel: int
    """`conv_depthwise_kernel_size`: the conformer convolution's kernel (odd)."""
    left_max_position: int
    """`left_max_position_embeddings`: relative distances to the left are clamped to this."""
    right_max_position: int
    """`right_max_position_embeddings`."""
    adapter_layers: int
    """`num_adapter_layers` when `add_adapter`, else 0: each halves the frame rate (`adapter_stride` 2)."""
    vocab_size: int
    """`vocab_size`: outputs of the CTC head."""

    @property
    def rows_per_frame(self) -> int:
        """Input rows (20 ms each) per output frame: 2 per adapter layer."""
        return 2**self.adapter_layers

    def tiny(self) -> Wav2Vec2BertArchitecture:
        """The same layout at test size: every module kind and the adapter kept, widths and depth cut down."""
        return replace(self, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, depthwise_kernel=5)

    def transformers_arguments(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "feature_projection_input_dim": FBANK.feature_size,
            "conv_depthwise_kernel_size": self.depthwise_kernel,
            "position_embeddings_type": "relative_key",
            "left_max_position_embeddings": self.left_max_position,
            "right_max_position_embeddings": self.right_max_position,
            "add_adapter": self.adapter_layers > 0,
            "num_adapter_layers": max(1, self.adapter_layers),
            "adapter_stride": 2,
            "adapter_kernel_size": 3,
        }


# facebook/w2v-bert-2.0's config.json (Wav2Vec2BertConfig's defaults are that checkpoint's).
W2V_BERT_2 = Wav2Vec2BertArchitecture(
    hidden_size=1024,
    num_layers=24,
    num_heads=16,
    intermediate_size=4096,
    depthwise_kernel=31,
    left_max_position=64,
    right_max_position=8,
    adapter_layers=0,
    vocab_size=len(STANDARD_ENGLISH),
)

BASE = Variant(
    name="base",
    description="w2v-BERT 2.0 conformer (facebook/w2v-bert-2.0, published as 600 M), 581 M parameters with a CTC head",
    checkpoint="facebook/w2v-bert-2.0",
    architecture=W2V_BERT_2,
)

BASE_ADAPTER = Variant(
    name="base-adapter",
    description="w2v-BERT 2.0 with the adapter layer CTC fine-tuning adds (40 ms frames), 606 M parameters",
    checkpoint="facebook/w2v-bert-2.0",
    architecture=replace(W2V_BERT_2, adapter_layers=1),
)


def _tiny(name: str, of: Variant[Wav2Vec2BertArchitecture]) -> Variant[Wav2Vec2BertArchitecture]:
    return tiny_variant(name, of, f"test size (hidden 32, 2 layers, 2 heads) with the layout of '{of.name}'")


@register
class Wav2Vec2Bert(Recipe[Wav2Vec2BertArchitecture]):
    name = "wav2vec2-bert"
    description = "w2v-BERT 2.0 speech recognition: 16 kHz filterbanks (computed from audio) to characters (CTC)"
    task = "ctc-asr"
    sources = ("transformers",)
    variants = (BASE, BASE_ADAPTER, _tiny("tiny", BASE), _tiny("tiny-adapter", BASE_ADAPTER))
    sample_rate = SAMPLE_RATE
    input_kind = "fbank"
    output = CTC_LOGITS_OUTPUT
    default_length_range = LengthRange(1.0, 10.0)
    # Logits of fp32 XNNPACK against eager PyTorch, as the other speech encoders.
    atol = 1e-3
    # No int8 scheme is measured yet (`int8_schemes` stays empty); the CTC head would stay fp32 as elsewhere.
    int8_keep_fp32 = MappingProxyType({"transformers": ("*.lm_head",)})
    transformers_model_type = "wav2vec2-bert"
    transformers_model_class_name = "Wav2Vec2BertForCTC"
    transformers_class_prefix = "Wav2Vec2Bert"
    # The model's own eager attention: it adds the relative-position bias, which the unpadded attention of the
    # wav2vec2 family (wav2vec2's `eager_attention_forward`) does not take.
    transformers_attention = "eager"

    @property
    def transformers_model_class(self) -> type[PreTrainedModel]:
        """`Wav2Vec2BertForCTC`; importing transformers happens here."""
        return transformers_class(self.transformers_model_class_name)

    def transformers_config(self, architecture: Wav2Vec2BertArchitecture) -> PretrainedConfig:
        return self.transformers_model_class.config_class(**architecture.transformers_arguments())

    def checkpoint_head(self, config: dict[str, object], weights: str) -> EncoderHead:
        """The head of a checkpoint, from its config.json's ``architectures`` (CTC when it lists none), as
        `SpeechEncoderRecipe.checkpoint_head`."""
        return head_of_checkpoint(config, weights, self.transformers_class_prefix)

    def _build(self, request: BuildRequest[Wav2Vec2BertArchitecture]) -> BuiltModel:
        import torch

        from ._modules import FbankEncoder

        architecture = request.variant.architecture
        head: EncoderHead = CTC_HEAD
        labels: tuple[str, ...] | None = None
        notes: tuple[str, ...] = ()
        vocabulary = STANDARD_ENGLISH
        if request.weights is None:
            torch.manual_seed(request.seed)
            model = self.transformers_model_class(self.transformers_config(architecture))
            model.set_attn_implementation(self.transformers_attention)
            provenance = synthetic_provenance(request.variant, request.seed)
            rows_per_frame = architecture.rows_per_frame
        else:
            weights = request.weights
            head = self.checkpoint_head(read_config(weights), weights)
            model_class = transformers_class(self.transformers_class_prefix + head.class_suffix)
            model, missing = load_pretrained(
                model_class, weights, self.transformers_model_type, self.name, self.transformers_attention, request.seed
            )
            refuse_incomplete(
                weights,
                [key for key in missing if not (head is CTC_HEAD and key.startswith("lm_head."))],
                model_class,
                self.transformers_model_type,
            )
            if missing:
                notes = (f"the checkpoint has no CTC head: lm_head is synthetic (seed {request.seed})",)
            config = model.config
            if head.output.task in ("audio-classification", "audio-frame-classification"):
                labels = tuple(str(config.id2label[index]) for index in range(config.num_labels))
            if head is CTC_HEAD:
                vocabulary = _tokenizer_vocabulary(weights, config.vocab_size)
            provenance = f"loaded from {weights} (transformers {model_class.__name__})"
            # The adapter is part of the base model: every head's frames come after it.
            rows_per_frame = config.adapter_stride**config.num_adapter_layers if config.add_adapter else 1
        module = FbankEncoder(model, FBANK.mel_bins, head.output_name)
        spec = fbank_input(FBANK, rows_per_frame, request.length_range)
        built_head = None
        if head is not CTC_HEAD:
            body = tuple(p for p in self.default_keep_fp32(request.source, request.variant.name) if p != "*.lm_head")
            built_head = BuiltHead(output=head.output, labels=labels, keep_fp32=body + head.keep_fp32)
        return self._package(
            request,
            module,
            spec,
            provenance,
            notes,
            vocabulary=vocabulary if head is CTC_HEAD else None,
            head=built_head,
            fbank=FBANK,
        )
