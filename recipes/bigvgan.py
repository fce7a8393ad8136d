"""BigVGAN vocoder (NVIDIA), v2 and v1: log-mel to 22.05, 24 or 44.1 kHz waveform.

The generator is this package's own implementation of the published architecture (`_bigvgan_generator`),
not NVIDIA/BigVGAN's code. PyPI's `bigvgan` (2.4.1) packages that repository whole: importing it imports
huggingface_hub, librosa, matplotlib and scipy, and installing it brings its training dependencies (auraloss,
nnaudio, pesq, tensorboard, ninja); its `from_pretrained` downloads from the hub. The generator is small
enough to write from the architecture, and checked against the repository's modules (the same output, to
the bit). Its module, parameter and buffer names are the original's, with the legacy
`torch.nn.utils.weight_norm` on every convolution and the activations' low-pass filters as buffers, so the
published checkpoints load unchanged.

The variants copy NVIDIA/BigVGAN's `configs/*.json` (the hub's nvidia/bigvgan_* checkpoints): v2 at 22.05 and
24 kHz upsamples 256x from 80 or 100 mels in six stages of 1536 initial channels, with SnakeBeta activations in
log scale, no tanh and no bias at the end; `v2-44khz-128band-512x` upsamples 512x from 2048-point frames; v1
(`22khz-80band`, `24khz-100band`) has the same generator with a tanh and a bias at the end; the `base` ones
upsample 256x in four stages of 512 channels. Every anti-aliased activation upsamples 2x, applies Snake or
SnakeBeta, and downsamples 2x with a 12-tap Kaiser-sinc low-pass.

The mel front end is BigVGAN's `meldataset.mel_spectrogram`: HiFi-GAN's (`MelSpectrogram(flavor="hifigan")`:
reflect-pad by (n_fft - hop) / 2, STFT without centering, `sqrt(re² + im² + 1e-9)`, librosa's slaney mel
filters from fmin to fmax, `log(clamp(x, 1e-5))`) with the config's parameters; `fmax` null is the Nyquist
frequency, as in librosa.

Without `weights` the generator has seeded synthetic weights in the published configuration (LeCun-normal
convolutions, Snake parameters drawn around their initial value): the waveform is audible noise, not speech.
`weights` (`--weights`) takes what NVIDIA publishes and what its training writes:

- a directory holding `config.json` and `bigvgan_generator.pt` (a hub checkpoint's files), or one `g_*`
  training checkpoint: the config's fields override the variant's, except `use_tanh_at_final` and
  `use_bias_at_final`, which are true when absent, as the original reads them (v1 configs have neither);
- a generator checkpoint file, `torch.save({"generator": state_dict})`, built with the variant's configuration.

A checkpoint saved after `remove_weight_norm()` (plain `weight` keys) loads too. A checkpoint of another
architecture (an original HiFi-GAN's among them), a discriminator checkpoint, or a config the generator cannot
be built from is refused with one line.

Lowered, the generator is one XNNPACK delegate with every anti-aliased activation inside: the lowering writes
each replicate padding as a concatenation (`ReplicatePaddingAsConcatPass`; XNNPACK has no replicate padding
and declines a slice of a dynamic length), each depthwise 2x upsampling as two interleaved stride-1 depthwise
convolutions (`DepthwiseTransposedConvAsPhasesPass`; XNNPACK runs a depthwise transposed convolution about
40 times slower), stores the Snake parameters' `exp` and reciprocal as constants
(`ParameterOnlyValuesAsConstantsPass`; XNNPACK has no reciprocal), and folds every weight norm.

Declaring the recipe imports no torch: the build imports it and `_bigvgan_generator`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Literal

from ._checkpoints import read_generator_state as shared_read_generator_state
from ._vocoder import audible_synthetic_init
from .errors import WeightsError, WeightsMismatchError
from .hifigan import OriginalHifiGanArchitecture, load_generator
from .registry import Recipe, register
from .spec import WAVEFORM_OUTPUT, BuildRequest, BuiltModel, LengthRange, Variant, mel_input, synthetic_provenance

if TYPE_CHECKING:
    import torch

    from ._bigvgan_generator import BigVGANGenerator

ActivationType = Literal["snake", "snakebeta"]

_ACTIVATIONS = ("snake", "snakebeta")
# The name of the generator checkpoint in a hub directory (`BigVGAN._save_pretrained`).
HUB_CHECKPOINT = "bigvgan_generator.pt"


@dataclass(frozen=True)
class BigVGANArchitecture(OriginalHifiGanArchitecture):
    """The generator's hyperparameters and its mel front end, under the names of BigVGAN's `config.json`: the
    original HiFi-GAN's and four more. It keeps HiFi-GAN's `front_end` and `to_config`, and its checks (`problem`)
    and config reading (`config_value`) of the shared fields; it replaces the block-type and dilation checks.

    `resblock` "1" is AMPBlock1 (a dilated and an undilated convolution per dilation), "2" AMPBlock2 (one per
    dilation); a block takes any number of dilations.
    """

    activation: ActivationType
    snake_logscale: bool
    """Snake parameters stored as logarithms (every published configuration)."""
    use_tanh_at_final: bool
    """A tanh at the end (v1); without it the output is clamped to [-1, 1] (v2)."""
    use_bias_at_final: bool

    family: ClassVar[str] = "BigVGAN"
    # The original reads these two with `h.get(name, True)`: v1 configs lack them.
    config_defaults: ClassVar[Mapping[str, object]] = MappingProxyType(
        {"use_tanh_at_final": True, "use_bias_at_final": True}
    )

    @property
    def activations(self) -> int:
        """Anti-aliased activations: two per dilation in an AMPBlock1, one in an AMPBlock2, and the last one."""
        per_dilation = 2 if self.resblock == "1" else 1
        per_stage = sum(per_dilation * len(d) for d in self.resblock_dilation_sizes)
        return len(self.upsample_rates) * per_stage + 1

    @property
    def convolutions(self) -> int:
        """conv_pre, one upsampler per stage, the AMP blocks' convolutions, conv_post: one per weight norm."""
        return 2 + len(self.upsample_rates) + self.activations - 1

    def tiny(self) -> BigVGANArchitecture:
        """Test size, with the published front end (hop 256): two stages upsampling 16x each, two AMP blocks a
        stage with one dilation each, 32 initial channels."""
        return replace(
            self,
            upsample_rates=(16, 16),
            upsample_kernel_sizes=(32, 32),
            upsample_initial_channel=32,
            resblock_kernel_sizes=(3, 7),
            resblock_dilation_sizes=((1,), (3,)),
        )

    def _block_problem(self) -> str | None:
        if self.resblock not in ("1", "2"):
            return f'resblock {self.resblock!r} is not a BigVGAN AMP block type ("1" or "2")'
        if self.activation not in _ACTIVATIONS:
            return f"activation {self.activation!r} is not one of {', '.join(_ACTIVATIONS)}"
        return None

    def _dilation_problem(self) -> str | None:
        # An AMP block of either type takes any number of dilations (HiFi-GAN's a fixed number per type).
        if any(not d or min(d) < 1 for d in self.resblock_dilation_sizes):
            return "every resblock_dilation_sizes entry should be a non-empty list of positive dilations"
        return None

    def generator(self) -> BigVGANGenerator:
        """The generator with plain convolutions (see `BigVGANGenerator.apply_weight_norm`)."""
        from ._bigvgan_generator import BigVGANGenerator

        return BigVGANGenerator(
            num_mels=self.num_mels,
            resblock=self.resblock,
            upsample_rates=self.upsample_rates,
            upsample_kernel_sizes=self.upsample_kernel_sizes,
            upsample_initial_channel=self.upsample_initial_channel,
            resblock_kernel_sizes=self.resblock_kernel_sizes,
            resblock_dilation_sizes=self.resblock_dilation_sizes,
            activation=self.activation,
            snake_logscale=self.snake_logscale,
            use_tanh_at_final=self.use_tanh_at_final,
            use_bias_at_final=self.use_bias_at_final,
        )

    def summary(self) -> str:
        """One line: block type, activation, upsampling and width."""
        rates = "x".join(map(str, self.upsample_rates))
        return (
            f'resblock "{self.resblock}" with {self.activation}, upsampling {rates}, '
            f"{self.upsample_initial_channel} initial channels, {self.num_mels} mels at {self.sampling_rate} Hz"
        )

    @classmethod
    def config_value(cls, name: str, value: object) -> object:
        """A config.json value as the field `name` holds it; TypeError naming the field otherwise."""
        if name == "activation":
            if not isinstance(value, str):
                raise TypeError(f"activation should be a string ({', '.join(_ACTIVATIONS)}), not {value!r}")
            return value
        if name in ("snake_logscale", "use_tanh_at_final", "use_bias_at_final"):
            if not isinstance(value, bool):
                raise TypeError(f"{name} should be true or false, not {value!r}")
            return value
        # The fields BigVGAN's config shares with HiFi-GAN's, read the same way.
        return super().config_value(name, value)


# configs/bigvgan_v2_22khz_80band_256x.json; the other published configurations change what they name.
_V2_22KHZ = BigVGANArchitecture(
    resblock="1",
    upsample_rates=(4, 4, 2, 2, 2, 2),
    upsample_kernel_sizes=(8, 8, 4, 4, 4, 4),
    upsample_initial_channel=1536,
    resblock_kernel_sizes=(3, 7, 11),
    resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5)),
    activation="snakebeta",
    snake_logscale=True,
    use_tanh_at_final=False,
    use_bias_at_final=False,
    num_mels=80,
    n_fft=1024,
    hop_size=256,
    win_size=1024,
    sampling_rate=22_050,
    fmin=0.0,
    fmax=None,
)
_V2_24KHZ = replace(_V2_22KHZ, num_mels=100, sampling_rate=24_000)
_V2_44KHZ = replace(_V2_22KHZ, num_mels=128, sampling_rate=44_100)
_V2_44KHZ_512X = replace(
    _V2_44KHZ,
    upsample_rates=(8, 4, 2, 2, 2, 2),
    upsample_kernel_sizes=(16, 8, 4, 4, 4, 4),
    n_fft=2048,
    hop_size=512,
    win_size=2048,
)
# v1 (configs/bigvgan_22khz_80band.json, bigvgan_24khz_100band.json): no use_tanh_at_final or use_bias_at_final
# keys, so both true; fmax 8 and 12 kHz.
_V1_22KHZ = replace(_V2_22KHZ, use_tanh_at_final=True, use_bias_at_final=True, fmax=8000.0)
_V1_24KHZ = replace(_V2_24KHZ, use_tanh_at_final=True, use_bias_at_final=True, fmax=12_000.0)
_BASE = {"upsample_rates": (8, 8, 2, 2), "upsample_kernel_sizes": (16, 16, 4, 4), "upsample_initial_channel": 512}


def _published(
    name: str, config: str, description: str, architecture: BigVGANArchitecture
) -> Variant[BigVGANArchitecture]:
    return Variant(name=name, description=description, checkpoint=f"nvidia/{config}", architecture=architecture)


V2_22KHZ_80BAND_256X = _published(
    "v2-22khz-80band-256x",
    "bigvgan_v2_22khz_80band_256x",
    "BigVGAN v2, 112 M parameters, 80 mels to 22.05 kHz, 256x (bigvgan_v2_22khz_80band_256x.json)",
    _V2_22KHZ,
)
V2_24KHZ_100BAND_256X = _published(
    "v2-24khz-100band-256x",
    "bigvgan_v2_24khz_100band_256x",
    "BigVGAN v2, 112 M parameters, 100 mels to 24 kHz, 256x (bigvgan_v2_24khz_100band_256x.json)",
    _V2_24KHZ,
)

VARIANTS: tuple[Variant[BigVGANArchitecture], ...] = (
    V2_22KHZ_80BAND_256X,
    _published(
        "v2-22khz-80band-fmax8k-256x",
        "bigvgan_v2_22khz_80band_fmax8k_256x",
        "BigVGAN v2, 112 M parameters, 80 mels up to 8 kHz to 22.05 kHz, 256x "
        "(bigvgan_v2_22khz_80band_fmax8k_256x.json)",
        replace(_V2_22KHZ, fmax=8000.0),
    ),
    V2_24KHZ_100BAND_256X,
    _published(
        "v2-44khz-128band-256x",
        "bigvgan_v2_44khz_128band_256x",
        "BigVGAN v2, 112 M parameters, 128 mels to 44.1 kHz, 256x (bigvgan_v2_44khz_128band_256x.json)",
        _V2_44KHZ,
    ),
    _published(
        "v2-44khz-128band-512x",
        "bigvgan_v2_44khz_128band_512x",
        "BigVGAN v2, 122 M parameters, 128 mels of 2048-point frames to 44.1 kHz, 512x "
        "(bigvgan_v2_44khz_128band_512x.json)",
        _V2_44KHZ_512X,
    ),
    _published(
        "22khz-80band",
        "bigvgan_22khz_80band",
        "BigVGAN v1, 112 M parameters, 80 mels up to 8 kHz to 22.05 kHz, tanh output (bigvgan_22khz_80band.json)",
        _V1_22KHZ,
    ),
    _published(
        "24khz-100band",
        "bigvgan_24khz_100band",
        "BigVGAN v1, 112 M parameters, 100 mels up to 12 kHz to 24 kHz, tanh output (bigvgan_24khz_100band.json)",
        _V1_24KHZ,
    ),
    _published(
        "base-22khz-80band",
        "bigvgan_base_22khz_80band",
        "BigVGAN v1 base, 14 M parameters, 80 mels up to 8 kHz to 22.05 kHz (bigvgan_base_22khz_80band.json)",
        replace(_V1_22KHZ, **_BASE),  # type: ignore[arg-type]
    ),
    _published(
        "base-24khz-100band",
        "bigvgan_base_24khz_100band",
        "BigVGAN v1 base, 14 M parameters, 100 mels up to 12 kHz to 24 kHz (bigvgan_base_24khz_100band.json)",
        replace(_V1_24KHZ, **_BASE),  # type: ignore[arg-type]
    ),
    Variant(
        name="tiny",
        description="test size of 'v2-22khz-80band-256x' (AMPBlock1, SnakeBeta in log scale, clamped output)",
        architecture=_V2_22KHZ.tiny(),
        checkpoint=None,
        hidden=True,
    ),
    Variant(
        name="tiny-amp2",
        description="test size with the options no published configuration takes: AMPBlock2, Snake in linear "
        "scale, tanh and bias at the end",
        architecture=replace(
            _V1_24KHZ.tiny(),
            resblock="2",
            activation="snake",
            snake_logscale=False,
            upsample_rates=(256,),
            upsample_kernel_sizes=(512,),
            resblock_dilation_sizes=((1, 3), (2, 6)),
        ),
        checkpoint=None,
        hidden=True,
    ),
)

for _variant in VARIANTS:
    assert _variant.architecture.problem() is None, (_variant.name, _variant.architecture.problem())


@register
class BigVGAN(Recipe[BigVGANArchitecture]):
    name = "bigvgan"
    description = "BigVGAN vocoder (NVIDIA v2 and v1 generators and checkpoints): log-mel to 22.05-44.1 kHz"
    task = "vocoder"
    sources = ("original",)
    """NVIDIA/BigVGAN's architecture and checkpoint format, implemented here."""
    variants = VARIANTS
    sample_rate = 22_050
    input_kind = "mel"
    output = WAVEFORM_OUTPUT
    default_length_range = LengthRange(1.0, 10.0)
    # Waveform samples in [-1, 1] of fp32 XNNPACK against eager PyTorch.
    atol = 1e-3
    # No int8 scheme: int8-static of the tiny generator (calibrated on speech-like files) stops in ExecuTorch
    # 1.5.1's XNNPACK preprocessing with "Weight and Input should both be quantized", and int8-dynamic quantizes
    # no 1-D or transposed convolution (recipes/_vocoder.py). fp32 is the export.
    int8_schemes = ()

    def _build(self, request: BuildRequest[BigVGANArchitecture]) -> BuiltModel:
        import torch

        from ._bigvgan_generator import BigVGANWaveform

        if request.weights is None:
            architecture = request.variant.architecture
            torch.manual_seed(request.seed)
            generator = architecture.generator()
            synthetic_init(generator)
            generator.apply_weight_norm()
            provenance = synthetic_provenance(request.variant, request.seed)
            notes: tuple[str, ...] = (
                "synthetic convolution weights are LeCun-normal (std 1/sqrt(fan-in)), conv_post's scaled by "
                f"{SYNTHETIC_POST_GAIN}, and the Snake parameters drawn around their initial value, so the "
                "waveform is audible noise",
            )
        else:
            architecture, generator, provenance, notes = load_checkpoint(request.weights, request.variant)
        mel = architecture.front_end()
        spec = mel_input(mel.sample_rate, mel.hop_length, mel.mel_bins, request.length_range)
        return self._package(request, BigVGANWaveform(generator), spec, provenance, notes, mel=mel)


# Synthetic weights.

SYNTHETIC_POST_GAIN = 0.1
"""conv_post's LeCun-normal weight is scaled by this: BigVGAN's residual streams grow through six stages of Snake,
and at full scale the synthetic waveform sits at the clamp (v2) or tanh (v1) limits, flat where any tolerance
would be vacuous."""
SYNTHETIC_SNAKE_STD = 0.2
"""Standard deviation of the synthetic Snake parameters in log scale (linear scale: their exponential), so that
alpha and beta differ per channel and from each other, as trained ones do."""


def synthetic_init(generator: BigVGANGenerator) -> None:
    """Draw every weight of `generator` (plain convolutions) from the global RNG; see the build notes."""
    import torch

    audible_synthetic_init(generator)
    with torch.no_grad():
        generator.conv_post.weight.mul_(SYNTHETIC_POST_GAIN)
        for activation in generator.periodic_activations():
            for parameter in activation.parameters():
                parameter.normal_(0.0, SYNTHETIC_SNAKE_STD)
                if not activation.logscale:
                    parameter.exp_()


# Loading the original format.


def load_checkpoint(
    weights: str, variant: Variant[BigVGANArchitecture]
) -> tuple[BigVGANArchitecture, BigVGANGenerator, str, tuple[str, ...]]:
    """The architecture, the loaded eval-mode generator, the provenance and the build notes of `weights`."""
    return load_generator(weights, variant, locate_checkpoint, read_generator_state, "BigVGAN generator")


def locate_checkpoint(weights: str) -> tuple[Path, Path | None]:
    """The generator checkpoint `weights` names and the config.json beside it (None for a file)."""
    path = Path(weights).expanduser()
    if path.is_file():
        return path, None
    if not path.is_dir():
        raise WeightsError(
            f"weights {weights} not found: pass a BigVGAN directory (config.json and {HUB_CHECKPOINT}) "
            "or a generator checkpoint file"
        )
    config = path / "config.json"
    if not config.is_file():
        raise WeightsError(
            f"weights directory {weights} has no config.json: put the checkpoint's config.json beside "
            f"{HUB_CHECKPOINT}, or pass the checkpoint file with --variant for its configuration"
        )
    if (path / HUB_CHECKPOINT).is_file():
        return path / HUB_CHECKPOINT, config
    # Training writes g_00000000 (generator) and do_00000000 (discriminators and optimizers).
    candidates = sorted(p for p in path.iterdir() if p.is_file() and p.name.startswith("g_"))
    if len(candidates) != 1:
        found = "none" if not candidates else f"{len(candidates)} g_* files ({candidates[0].name}, ...)"
        raise WeightsError(
            f"weights directory {weights} holds no {HUB_CHECKPOINT} and {found}: put one generator checkpoint "
            "beside config.json, or pass the checkpoint file with --variant"
        )
    return candidates[0], config


def read_generator_state(path: Path) -> dict[str, torch.Tensor]:
    """The generator state dict of the checkpoint file at `path` (`{"generator": ...}`, or a bare state dict)."""
    state = shared_read_generator_state(
        path,
        family="BigVGAN",
        wanted="a BigVGAN generator checkpoint",
        discriminators=("mpd", "mrd"),
        discriminator_contents="mpd, mrd and optimizer state",
        discriminator_remedy=f"pass {HUB_CHECKPOINT} or the g_* checkpoint of the same step",
    )
    if not any(".act.alpha" in str(key) for key in state):
        # The same top-level names as BigVGAN's, without anti-aliased Snake activations: HiFi-GAN's layout.
        raise WeightsMismatchError(
            f"{path} holds a generator without Snake activations (an original HiFi-GAN's?), not BigVGAN's: "
            "build it with recipe 'hifigan', or pass a BigVGAN checkpoint"
        )
    return dict(state)
