"""Vocos vocoder (gemelo-ai/vocos): 100-bin log-mel to 24 kHz waveform through a predicted spectrum and an inverse STFT.

The model is this package's own implementation of the published architecture (`_vocos_model`), not the PyPI
`vocos` package: that package requires `encodec` (pinned to 0.1.1), `einops`, `scipy` and `huggingface_hub`,
imports EnCodec whatever the model (`import vocos` loads `feature_extractors`), and its
`Vocos.from_pretrained` downloads; mel-to-waveform inference is a ConvNeXt stack and an inverse STFT, small
enough to write from the architecture (checked once against the original's modules: the same output, bit for
bit) and against the published configuration. The module and parameter names are the original's, so a released
`pytorch_model.bin` loads unchanged; the head is written so that the lowering can take the inverse STFT apart
(`_vocos_model` says how, and why the values are the same).

The variant `mel-24khz` copies charactr/vocos-mel-24khz's `config.yaml`: `MelSpectrogramFeatures` at 24 kHz
(n_fft 1024, hop 256, 100 mels, padding "center"), a `VocosBackbone` of 8 ConvNeXt blocks (dim 512,
intermediate 1536) and an `ISTFTHead` (n_fft 1024, hop 256, padding "center"): 13.5 M parameters. Its mel
front end is `MelSpectrogram(flavor="vocos")`: torchaudio's `MelSpectrogram(power=1)`, HTK mels, log of the
magnitude clipped at 1e-7.

Without `weights` the weights are synthetic, drawn from the build seed as the original initializes them
(backbone convolutions and linears truncated-normal with std 0.02, zero biases, layer scale 1 / layers; the
head's linear as torch's default): not a trained vocoder. `weights` (`--weights`) takes what the hub repository
holds:

- a directory with `config.yaml` and `pytorch_model.bin` (what `Vocos.from_hparams` and `torch.load` read);
  the model is built as the config describes it, whatever the variant (`MelSpectrogramFeatures`' defaults
  for the front-end arguments it omits). PyYAML reads it (transformers requires it);
- a `pytorch_model.bin` file alone, built with the variant's configuration.

The state dict's `backbone.*`, `head.out.*` and `head.istft.window` entries are loaded; the feature
extractor's buffers (`feature_extractor.mel_spec.*`: its window and filter bank) are not needed, the program's
description holds the front end. A checkpoint or config of another Vocos (EnCodec tokens, the ResNet backbone,
an IMDCT head, padding "same") or one that does not fit the configuration is refused with one line.

The program takes `frames` mel frames and returns `frames * 256` samples: Vocos' `decode` gives
`(frames - 1) * 256`, the last frame's 256 are zeros (`_vocos_model.VocosWaveform`).

Declaring the recipe imports no torch: the build imports it and `_vocos_model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from audiodeploy.program.mel import MelSpectrogram

from ._checkpoints import check_fits, first_line, load_payload
from .errors import WeightsError, WeightsMismatchError
from .registry import Recipe, register
from .spec import (
    WAVEFORM_OUTPUT,
    BuildRequest,
    BuiltModel,
    LengthRange,
    Variant,
    mel_input,
    synthetic_provenance,
    tiny_variant,
)

if TYPE_CHECKING:
    import torch

    from ._vocos_model import Vocos

CONFIG_FILE = "config.yaml"
CHECKPOINT_FILE = "pytorch_model.bin"

# The classes of the original's config.yaml this recipe builds, by `class_path`.
_FEATURE_EXTRACTOR = "vocos.feature_extractors.MelSpectrogramFeatures"
_BACKBONE = "vocos.models.VocosBackbone"
_HEAD = "vocos.heads.ISTFTHead"
# What the other published classes are, for the refusal.
_OTHER_CLASSES = {
    "vocos.feature_extractors.EncodecFeatures": "EnCodec-token features (charactr/vocos-encodec-24khz)",
    "vocos.models.VocosResNetBackbone": "the ResNet backbone",
    "vocos.heads.IMDCTSymExpHead": "an IMDCT head",
    "vocos.heads.IMDCTCosHead": "an IMDCT head",
}


@dataclass(frozen=True)
class VocosArchitecture:
    """The model's hyperparameters and its mel front end, under the names of the original config's arguments."""

    sample_rate: int
    """`feature_extractor.sample_rate`."""
    mel_n_fft: int
    """`feature_extractor.n_fft`: the front end's FFT and window length."""
    n_mels: int
    """`feature_extractor.n_mels`, `backbone.input_channels`."""
    hop_length: int
    """`feature_extractor.hop_length`, `head.hop_length`: samples per frame."""
    dim: int
    """`backbone.dim`, `head.dim`."""
    intermediate_dim: int
    num_layers: int
    layer_scale_init_value: float | None
    """`None`: the original's default, `1 / num_layers`."""
    n_fft: int
    """`head.n_fft`: the inverse STFT's length (and window's)."""

    @property
    def layer_scale(self) -> float:
        # The original writes `layer_scale_init_value or 1 / num_layers`: 0 also means the default.
        return self.layer_scale_init_value or 1 / self.num_layers

    def tiny(self) -> VocosArchitecture:
        """Test size: the same front end and inverse STFT, 2 ConvNeXt blocks of width 32 (intermediate 96)."""
        return replace(self, dim=32, intermediate_dim=96, num_layers=2)

    def problem(self) -> str | None:
        """What keeps the model from being built with its front end, or None."""
        for name in ("sample_rate", "mel_n_fft", "n_mels", "hop_length", "dim", "intermediate_dim", "num_layers"):
            if getattr(self, name) <= 0:
                return f"{name} should be positive, not {getattr(self, name)}"
        if self.n_fft < 2 or self.n_fft % 2:
            return f"head n_fft should be even, not {self.n_fft}"
        if not 0 < self.hop_length <= self.n_fft // 2:
            return f"hop_length {self.hop_length} should be at most half the head's n_fft ({self.n_fft})"
        try:
            self.front_end()
        except ValueError as error:
            return str(error)
        return None

    def front_end(self) -> MelSpectrogram:
        """The original `MelSpectrogramFeatures(sample_rate, n_fft, hop_length, n_mels, padding="center")`."""
        return MelSpectrogram(
            flavor="vocos",
            sample_rate=self.sample_rate,
            mel_bins=self.n_mels,
            hop_length=self.hop_length,
            win_length=self.mel_n_fft,
            fmin=0.0,
            fmax=None,
        )

    def model(self) -> Vocos:
        from ._vocos_model import Vocos

        return Vocos(
            input_channels=self.n_mels,
            dim=self.dim,
            intermediate_dim=self.intermediate_dim,
            num_layers=self.num_layers,
            layer_scale_init_value=self.layer_scale,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
        )

    def summary(self) -> str:
        """One line: depth, width and the front end."""
        return (
            f"{self.num_layers} ConvNeXt blocks of dim {self.dim} (intermediate {self.intermediate_dim}), "
            f"{self.n_mels} mels at {self.sample_rate} Hz, hop {self.hop_length}, n_fft {self.n_fft}"
        )

    def to_config(self) -> dict[str, object]:
        """The architecture as the original `config.yaml` (the hub repository's) writes it."""
        backbone: dict[str, object] = {
            "input_channels": self.n_mels,
            "dim": self.dim,
            "intermediate_dim": self.intermediate_dim,
            "num_layers": self.num_layers,
        }
        if self.layer_scale_init_value is not None:
            backbone["layer_scale_init_value"] = self.layer_scale_init_value
        return {
            "feature_extractor": {
                "class_path": _FEATURE_EXTRACTOR,
                "init_args": {
                    "sample_rate": self.sample_rate,
                    "n_fft": self.mel_n_fft,
                    "hop_length": self.hop_length,
                    "n_mels": self.n_mels,
                    "padding": "center",
                },
            },
            "backbone": {"class_path": _BACKBONE, "init_args": backbone},
            "head": {
                "class_path": _HEAD,
                "init_args": {"dim": self.dim, "n_fft": self.n_fft, "hop_length": self.hop_length, "padding": "center"},
            },
        }


_MEL_24KHZ = VocosArchitecture(
    sample_rate=24_000,
    mel_n_fft=1024,
    n_mels=100,
    hop_length=256,
    dim=512,
    intermediate_dim=1536,
    num_layers=8,
    layer_scale_init_value=None,
    n_fft=1024,
)

MEL_24KHZ = Variant(
    name="mel-24khz",
    description="Vocos mel-24khz, 13.5 M parameters, 8 ConvNeXt blocks of dim 512, 24 kHz (config.yaml)",
    checkpoint="charactr/vocos-mel-24khz",
    architecture=_MEL_24KHZ,
)

assert MEL_24KHZ.architecture.problem() is None, MEL_24KHZ.architecture.problem()


@register
class VocosRecipe(Recipe[VocosArchitecture]):
    name = "vocos"
    description = "Vocos vocoder (gemelo-ai/vocos ConvNeXt backbone, inverse STFT head): 100-bin log-mel to 24 kHz"
    task = "vocoder"
    sources = ("original",)
    """The original repository's architecture and checkpoint layout, implemented here."""
    variants = (
        MEL_24KHZ,
        tiny_variant("tiny", MEL_24KHZ, "test size of 'mel-24khz': 2 ConvNeXt blocks of dim 32, the same head"),
    )
    sample_rate = 24_000
    input_kind = "mel"
    output = WAVEFORM_OUTPUT
    default_length_range = LengthRange(1.0, 10.0)
    # Waveform samples of fp32 XNNPACK against eager PyTorch (measured on synthetic weights: 2e-7 for both tiny
    # and mel-24khz, against samples of standard deviation 0.025); trained weights reach magnitudes of 100 per
    # bin, so the bound is that of the other vocoders, on waveforms in [-1, 1].
    atol = 1e-3
    # int8-static, fp32 stays the default export (as for the HiFi-GANs, recipes/_vocoder.py). Tiny, calibrated on
    # five speech-like files and measured on three others at 0.25 s: every GEMM int8 gave 21.6 dB waveform SNR,
    # one delegate; the head (its linear to magnitude and phase, whose exp() multiplies an error, and the
    # inverse STFT's convolutions) kept fp32 gives 33.2 dB and log-mel distance 0.011, with the ConvNeXt
    # backbone, most of the weights, int8. int8-dynamic is not measured on vocoders.
    int8_schemes = ("int8-static",)
    int8_keep_fp32 = MappingProxyType({"original": ("*.head.*",)})

    def _build(self, request: BuildRequest[VocosArchitecture]) -> BuiltModel:
        import torch

        from ._vocos_model import VocosWaveform

        if request.weights is None:
            architecture = request.variant.architecture
            torch.manual_seed(request.seed)
            vocos = architecture.model()
            vocos.backbone.published_init()
            provenance = synthetic_provenance(request.variant, request.seed)
            notes: tuple[str, ...] = (
                "synthetic weights drawn as the original initializes them (std 0.02): not a trained vocoder",
            )
        else:
            architecture, vocos, provenance, notes = load_checkpoint(request.weights, request.variant)
        mel = architecture.front_end()
        spec = mel_input(mel.sample_rate, mel.hop_length, mel.mel_bins, request.length_range)
        notes += ("the last frame's hop_length samples are zeros: a centred inverse STFT ends a hop earlier",)
        return self._package(request, VocosWaveform(vocos), spec, provenance, notes, mel=mel)


# Loading the original layout.


def load_checkpoint(
    weights: str, variant: Variant[VocosArchitecture]
) -> tuple[VocosArchitecture, Vocos, str, tuple[str, ...]]:
    """The architecture, the loaded eval-mode model, the provenance and the build notes of `weights`."""
    checkpoint, config_path = locate_checkpoint(weights)
    if config_path is None:
        architecture, built_from = variant.architecture, f"variant '{variant.name}'"
    else:
        architecture, built_from = read_config(config_path), str(config_path)
    state = read_state(checkpoint)
    model = architecture.model()
    check_fits(
        state,
        model.state_dict(),
        checkpoint,
        model=f"the Vocos of {built_from} ({architecture.summary()})",
        layout=_layout(state),
        hint=(
            f"pass --variant of the configuration it was trained with, or a directory holding it and its {CONFIG_FILE}"
        ),
    )
    model.load_state_dict(state)
    notes: tuple[str, ...] = ()
    if architecture != variant.architecture:
        notes = (f"architecture from {config_path} ({architecture.summary()}), not variant '{variant.name}'",)
    provenance = f"loaded from {checkpoint} (original Vocos, configuration of {built_from})"
    return architecture, model.eval(), provenance, notes


def locate_checkpoint(weights: str) -> tuple[Path, Path | None]:
    """The `pytorch_model.bin` that `weights` names and the `config.yaml` beside it (None for a file)."""
    path = Path(weights).expanduser()
    if path.is_file():
        return path, None
    if not path.is_dir():
        raise WeightsError(
            f"weights {weights} not found: pass a directory holding Vocos' {CONFIG_FILE} and {CHECKPOINT_FILE} "
            f"(the charactr/vocos-mel-24khz layout), or the {CHECKPOINT_FILE} file"
        )
    for name in (CONFIG_FILE, CHECKPOINT_FILE):
        if not (path / name).is_file():
            raise WeightsError(
                f"weights directory {weights} has no {name}: put Vocos' {CONFIG_FILE} and {CHECKPOINT_FILE} "
                f"side by side, or pass the {CHECKPOINT_FILE} file with --variant for its configuration"
            )
    return path / CHECKPOINT_FILE, path / CONFIG_FILE


def read_config(path: Path) -> VocosArchitecture:
    """The architecture the original `config.yaml` at `path` describes (`Vocos.from_hparams`' input); the
    feature extractor's arguments it omits take `MelSpectrogramFeatures`' defaults."""
    features, backbone, head = _config_parts(path, _read_yaml_mapping(path))
    _check_mel_vocos(path, features, backbone, head)
    try:
        architecture = _architecture(features, backbone, head)
        given_twice = _arguments_given_twice(architecture, backbone, head)
    except (TypeError, ValueError) as error:
        raise WeightsError(f"{path} is not a Vocos config: {error}") from None
    for names, (first, second) in given_twice.items():
        if first != second:
            raise WeightsError(f"{path} describes no Vocos this recipe builds: {names} differ ({first}, {second})")
    problem = architecture.problem()
    if problem is not None:
        raise WeightsError(f"{path} describes no Vocos this recipe builds: {problem}")
    return architecture


def _read_yaml_mapping(path: Path) -> dict[str, object]:
    import yaml

    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise WeightsError(f"cannot read {path}: {first_line(error)}") from None
    if not isinstance(config, dict):
        raise WeightsError(f"{path} is not a Vocos config: it holds no YAML mapping")
    return config


def _config_parts(
    path: Path, config: Mapping[str, object]
) -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
    """The `init_args` of the feature extractor, the backbone and the head, each checked to be the class built."""
    try:
        return (
            _arguments(config, "feature_extractor", _FEATURE_EXTRACTOR),
            _arguments(config, "backbone", _BACKBONE),
            _arguments(config, "head", _HEAD),
        )
    except _OtherModel as other:
        raise WeightsMismatchError(
            f"{path} describes a Vocos with {other}: this recipe builds the mel-spectrogram Vocos "
            f"({_FEATURE_EXTRACTOR}, {_BACKBONE}, {_HEAD}); pass a checkpoint such as charactr/vocos-mel-24khz"
        ) from None
    except (TypeError, ValueError) as error:
        raise WeightsError(f"{path} is not a Vocos config: {error}") from None


def _check_mel_vocos(
    path: Path, features: Mapping[str, object], backbone: Mapping[str, object], head: Mapping[str, object]
) -> None:
    """Refuse the options of the published classes that the model here does not implement."""
    for part, arguments in (("feature_extractor", features), ("head", head)):
        padding = arguments.get("padding", "same" if part == "head" else "center")
        if padding != "center":
            raise WeightsError(
                f"{path}: {part} padding {padding!r} is not built by this recipe, which takes padding 'center' "
                "(charactr/vocos-mel-24khz); export a model trained with padding: center"
            )
    if backbone.get("adanorm_num_embeddings") is not None:
        raise WeightsMismatchError(
            f"{path} describes a Vocos conditioned on a bandwidth (adanorm_num_embeddings, the EnCodec model): "
            "this recipe builds the mel-spectrogram Vocos; pass a checkpoint such as charactr/vocos-mel-24khz"
        )


def _architecture(
    features: Mapping[str, object], backbone: Mapping[str, object], head: Mapping[str, object]
) -> VocosArchitecture:
    """The architecture the parts' arguments give; TypeError or ValueError for a missing or mistyped one."""
    return VocosArchitecture(
        sample_rate=_integer("feature_extractor.sample_rate", features.get("sample_rate", 24_000)),
        mel_n_fft=_integer("feature_extractor.n_fft", features.get("n_fft", 1024)),
        n_mels=_integer("feature_extractor.n_mels", features.get("n_mels", 100)),
        hop_length=_integer("feature_extractor.hop_length", features.get("hop_length", 256)),
        dim=_integer("backbone.dim", _required(backbone, "backbone", "dim")),
        intermediate_dim=_integer("backbone.intermediate_dim", _required(backbone, "backbone", "intermediate_dim")),
        num_layers=_integer("backbone.num_layers", _required(backbone, "backbone", "num_layers")),
        layer_scale_init_value=_optional_number(
            "backbone.layer_scale_init_value", backbone.get("layer_scale_init_value")
        ),
        n_fft=_integer("head.n_fft", _required(head, "head", "n_fft")),
    )


def _arguments_given_twice(
    architecture: VocosArchitecture, backbone: Mapping[str, object], head: Mapping[str, object]
) -> dict[str, tuple[int, int]]:
    """The arguments the original takes twice, each with the value `architecture` was built from: the model is
    built from one of each pair, so the two must agree."""
    return {
        "backbone input_channels and feature_extractor n_mels": (
            _integer("backbone.input_channels", _required(backbone, "backbone", "input_channels")),
            architecture.n_mels,
        ),
        "head dim and backbone dim": (_integer("head.dim", _required(head, "head", "dim")), architecture.dim),
        "head hop_length and feature_extractor hop_length": (
            _integer("head.hop_length", _required(head, "head", "hop_length")),
            architecture.hop_length,
        ),
    }


class _OtherModel(Exception):
    """A config part names another published class than the one this recipe builds."""


def _arguments(config: Mapping[str, object], part: str, expected_class: str) -> dict[str, object]:
    """`config[part]["init_args"]` after checking its `class_path`; TypeError or ValueError when malformed."""
    entry = config.get(part)
    if not isinstance(entry, Mapping):
        raise ValueError(f"it has no '{part}' entry with class_path and init_args")
    class_path = entry.get("class_path")
    if class_path != expected_class:
        if class_path in _OTHER_CLASSES:
            raise _OtherModel(f"{_OTHER_CLASSES[class_path]} ({part} {class_path})")
        raise ValueError(f"{part} class_path should be {expected_class}, not {class_path!r}")
    arguments = entry.get("init_args", {})
    if not isinstance(arguments, Mapping):
        raise TypeError(f"{part} init_args should be a mapping, not {arguments!r}")
    return dict(arguments)


def _required(arguments: Mapping[str, object], part: str, name: str) -> object:
    if name not in arguments:
        raise ValueError(f"{part} init_args has no {name}")
    return arguments[name]


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} should be an integer, not {value!r}")
    return value


def _optional_number(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} should be a number, not {value!r}")
    return float(value)


def read_state(path: Path) -> dict[str, torch.Tensor]:
    """The backbone and head entries of the state dict at `path`; the feature extractor's buffers are dropped."""
    import torch

    payload = load_payload(path)
    if not isinstance(payload, Mapping) or not all(isinstance(v, torch.Tensor) for v in payload.values()):
        raise WeightsError(f"{path} is not a Vocos state dict (a mapping of names to tensors, as pytorch_model.bin)")
    state = {str(key): value for key, value in payload.items() if not str(key).startswith("feature_extractor.")}
    if not any(key.startswith("backbone.") for key in state):
        keys = ", ".join(map(str, list(payload)[:3])) or "none"
        raise WeightsError(
            f"{path} holds no Vocos backbone.* weights (its keys: {keys}): pass Vocos' {CHECKPOINT_FILE}"
        )
    return state


def _layout(state: Mapping[str, torch.Tensor]) -> str:
    """What the checkpoint's keys say of its model: blocks, backbone and head kind."""
    if any(key.startswith("backbone.resnet.") for key in state):
        backbone = "a ResNet backbone"
    elif any(key.endswith(".norm.scale.weight") for key in state):
        backbone = "a bandwidth-conditioned (AdaLayerNorm, EnCodec) backbone"
    else:
        blocks = len({key.split(".")[2] for key in state if key.startswith("backbone.convnext.")})
        backbone = f"{blocks} ConvNeXt blocks"
    if any(key.startswith("head.imdct.") for key in state):
        head = "an IMDCT head"
    elif "head.istft.window" in state:
        head = "an ISTFT head"
    else:
        head = "no ISTFT head"
    return f"the checkpoint has {backbone} and {head}"
