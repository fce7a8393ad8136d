"""HiFi-GAN vocoder as the original repository publishes it: 80-bin log-mel to 22.05 kHz waveform, V1, V2, V3.

The generator is this package's own implementation of the published architecture (`_hifigan_generator`),
not the repository's code: the original is not a package (no PyPI release; its `models.py` imports the
training utilities, matplotlib among them), and the generator is small enough to write from the architecture
and check against the published configurations. Its module and parameter names are the original's, with the
legacy `torch.nn.utils.weight_norm` on every convolution, so the original checkpoints load unchanged.

The variants copy jik876/hifi-gan's `config_v1.json`, `config_v2.json` and `config_v3.json`: V1 and V2 (512 and
128 initial channels) use residual blocks of type "1", V3 (256 channels) type "2"; all three upsample 256×
from mels of the original front end (`MelSpectrogram(flavor="hifigan")`: 22.05 kHz, n_fft and window 1024,
hop 256, 80 slaney mels from 0 to 8 kHz, log of the magnitude clamped at 1e-5).

`weights` (`--weights`) takes what the original training writes:

- a generator checkpoint file, `torch.save({"generator": state_dict})` (`g_02500000`, `generator_v1`), built
  with the variant's configuration;
- a directory holding `config.json` and one generator checkpoint (`g_*` or `generator*`); the config's fields
  (`resblock`, `upsample_*`, `resblock_*`, `num_mels`, `n_fft`, `hop_size`, `win_size`, `sampling_rate`,
  `fmin`, `fmax`) override the variant's.

A checkpoint saved after `remove_weight_norm()` (plain `weight` keys) loads too; its convolutions then have no
weight norm. A checkpoint of another architecture, a config the generator cannot be built from, or a
discriminator checkpoint (`do_*`) is refused with one line.

Declaring the recipe imports no torch: the build imports it and `_hifigan_generator`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from audiodeploy.program.mel import MelSpectrogram

from ._checkpoints import check_fits, first_line
from ._checkpoints import read_generator_state as shared_read_generator_state
from ._vocoder import audible_synthetic_init
from .errors import WeightsError
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

    from ._hifigan_generator import HifiGanGenerator

ResblockType = Literal["1", "2"]

# Dilations each residual block type reads per kernel size (type "1" pairs each with an undilated convolution).
_DILATIONS_PER_RESBLOCK = {"1": 3, "2": 2}


@dataclass(frozen=True)
class OriginalHifiGanArchitecture:
    """The generator's hyperparameters and its mel front end, under the names of the original `config.json`."""

    resblock: ResblockType
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    upsample_initial_channel: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    num_mels: int
    n_fft: int
    hop_size: int
    win_size: int
    sampling_rate: int
    fmin: float
    fmax: float | None
    """`None` (`null` in a config): the Nyquist frequency."""

    family: ClassVar[str] = "HiFi-GAN"
    """The checkpoint format's name, in what `read_config` says of a config.json."""
    config_defaults: ClassVar[Mapping[str, object]] = MappingProxyType({})
    """Fields a config.json may leave out, with the values the format's own code reads for them: a config
    without them does not keep the variant's."""

    @property
    def convolutions(self) -> int:
        """conv_pre, one upsampler per stage, the residual blocks' convolutions, conv_post."""
        per_block = {"1": 6, "2": 2}[self.resblock]
        return 2 + len(self.upsample_rates) * (1 + len(self.resblock_kernel_sizes) * per_block)

    def tiny(self) -> OriginalHifiGanArchitecture:
        """Test size: the same stages with 32 initial channels, and the first two of the three residual blocks per
        stage (their kernels and dilations): every kind of layer, in two thirds of the convolutions (a lowering's
        time grows with them)."""
        return replace(
            self,
            upsample_initial_channel=32,
            resblock_kernel_sizes=self.resblock_kernel_sizes[:2],
            resblock_dilation_sizes=self.resblock_dilation_sizes[:2],
        )

    def problem(self) -> str | None:
        """What keeps the generator from being built with its hop and front end, or None.

        The first problem found, in this order: the block type (`_block_problem`), the upsampling stages, the
        residual blocks' kernels, their dilations (`_dilation_problem`), the hop and the front end. A format that
        extends this one (BigVGAN) overrides the two hooks for what it builds differently.
        """
        return (
            self._block_problem()
            or self._upsampling_problem()
            or self._resblock_kernel_problem()
            or self._dilation_problem()
            or self._front_end_problem()
        )

    def _block_problem(self) -> str | None:
        """Why `resblock` names no block this format builds, or None."""
        if self.resblock not in _DILATIONS_PER_RESBLOCK:
            return f'resblock {self.resblock!r} is not a HiFi-GAN residual block type ("1" or "2")'
        return None

    def _upsampling_problem(self) -> str | None:
        stages = len(self.upsample_rates)
        if stages == 0 or stages != len(self.upsample_kernel_sizes):
            return "upsample_rates and upsample_kernel_sizes should be non-empty lists of the same length"
        for rate, kernel in zip(self.upsample_rates, self.upsample_kernel_sizes):
            if rate < 1 or kernel < rate or (rate == 1 and kernel % 2 == 0):
                return (
                    f"upsample kernel {kernel} at rate {rate} does not upsample exactly (a kernel at least the rate, "
                    "odd at rate 1)"
                )
        if self.upsample_initial_channel < 2**stages or self.upsample_initial_channel % 2**stages:
            return f"upsample_initial_channel {self.upsample_initial_channel} cannot be halved {stages} times"
        return None

    def _resblock_kernel_problem(self) -> str | None:
        if not self.resblock_kernel_sizes or len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            return "resblock_kernel_sizes and resblock_dilation_sizes should be non-empty lists of the same length"
        if any(kernel < 1 or kernel % 2 == 0 for kernel in self.resblock_kernel_sizes):
            return f"resblock_kernel_sizes {list(self.resblock_kernel_sizes)} should be odd"
        return None

    def _dilation_problem(self) -> str | None:
        """Why the dilations do not fit the block type, or None; runs after `_block_problem` passed."""
        needed = _DILATIONS_PER_RESBLOCK[self.resblock]
        if any(len(d) < needed or min(d) < 1 for d in self.resblock_dilation_sizes):
            return f'a type "{self.resblock}" residual block needs {needed} positive dilations per kernel size'
        return None

    def _front_end_problem(self) -> str | None:
        if self.hop_size != math.prod(self.upsample_rates):
            return f"hop_size {self.hop_size} is not the product of upsample_rates {list(self.upsample_rates)}"
        try:
            self.front_end()
        except ValueError as error:
            return str(error)
        return None

    def front_end(self) -> MelSpectrogram:
        """The original `mel_spectrogram(y, n_fft, num_mels, sampling_rate, hop_size, win_size, fmin, fmax)`."""
        return MelSpectrogram(
            flavor="hifigan",
            sample_rate=self.sampling_rate,
            mel_bins=self.num_mels,
            hop_length=self.hop_size,
            win_length=self.win_size,
            fmin=self.fmin,
            fmax=self.fmax,
            n_fft=self.n_fft,
        )

    def generator(self) -> HifiGanGenerator:
        """The generator with plain convolutions (see `HifiGanGenerator.apply_weight_norm`)."""
        from ._hifigan_generator import HifiGanGenerator

        return HifiGanGenerator(
            num_mels=self.num_mels,
            resblock=self.resblock,
            upsample_rates=self.upsample_rates,
            upsample_kernel_sizes=self.upsample_kernel_sizes,
            upsample_initial_channel=self.upsample_initial_channel,
            resblock_kernel_sizes=self.resblock_kernel_sizes,
            resblock_dilation_sizes=self.resblock_dilation_sizes,
        )

    def summary(self) -> str:
        """One line: block type, upsampling and width."""
        rates = "x".join(map(str, self.upsample_rates))
        return (
            f'resblock "{self.resblock}", upsampling {rates}, {self.upsample_initial_channel} initial channels, '
            f"{self.num_mels} mels at {self.sampling_rate} Hz"
        )

    def to_config(self) -> dict[str, object]:
        """The architecture as the fields of an original `config.json`."""
        config: dict[str, object] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "resblock_dilation_sizes":
                value = [list(d) for d in value]
            elif isinstance(value, tuple):
                value = list(value)
            config[field.name] = value
        return config

    @classmethod
    def config_value(cls, name: str, value: object) -> object:
        """A config.json value as the field `name` holds it; TypeError naming the field otherwise."""
        if name == "resblock":
            if not isinstance(value, str):
                raise TypeError(f'resblock should be the string "1" or "2", not {value!r}')
            return value
        if name in ("fmin", "fmax"):
            if value is None and name == "fmax":
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} should be a number, not {value!r}")
            return float(value)
        if name == "resblock_dilation_sizes":
            if not isinstance(value, list) or not all(isinstance(d, list) for d in value):
                raise TypeError(f"{name} should be a list of lists of integers, not {value!r}")
            return tuple(tuple(_integer(name, x) for x in d) for d in value)
        if name in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes"):
            if not isinstance(value, list):
                raise TypeError(f"{name} should be a list of integers, not {value!r}")
            return tuple(_integer(name, x) for x in value)
        return _integer(name, value)


# The published configurations' mel front end (all three configs share it).
_FRONT_END = {
    "num_mels": 80,
    "n_fft": 1024,
    "hop_size": 256,
    "win_size": 1024,
    "sampling_rate": 22_050,
    "fmin": 0.0,
    "fmax": 8000.0,
}

_V1 = OriginalHifiGanArchitecture(
    resblock="1",
    upsample_rates=(8, 8, 2, 2),
    upsample_kernel_sizes=(16, 16, 4, 4),
    upsample_initial_channel=512,
    resblock_kernel_sizes=(3, 7, 11),
    resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5)),
    **_FRONT_END,  # type: ignore[arg-type]
)
_V2 = replace(_V1, upsample_initial_channel=128)
_V3 = replace(
    _V1,
    resblock="2",
    upsample_rates=(8, 8, 4),
    upsample_kernel_sizes=(16, 16, 8),
    upsample_initial_channel=256,
    resblock_kernel_sizes=(3, 5, 7),
    resblock_dilation_sizes=((1, 2), (2, 6), (3, 12)),
)

V1 = Variant(
    name="v1",
    description="HiFi-GAN V1, 13.9 M parameters, 78 weight-normalized convolutions, 22.05 kHz (config_v1.json)",
    checkpoint="jik876/hifi-gan V1",
    architecture=_V1,
)
V2 = Variant(
    name="v2",
    description="HiFi-GAN V2, 0.93 M parameters, V1 at 128 channels, 22.05 kHz (config_v2.json)",
    checkpoint="jik876/hifi-gan V2",
    architecture=_V2,
)
V3 = Variant(
    name="v3",
    description='HiFi-GAN V3, 1.46 M parameters, type "2" residual blocks, 22.05 kHz (config_v3.json)',
    checkpoint="jik876/hifi-gan V3",
    architecture=_V3,
)

for _variant in (V1, V2, V3):
    assert _variant.architecture.problem() is None, (_variant.name, _variant.architecture.problem())


@register
class OriginalHifiGan(Recipe[OriginalHifiGanArchitecture]):
    name = "hifigan"
    description = "HiFi-GAN vocoder (original jik876/hifi-gan generator and checkpoints): 80-bin log-mel to 22.05 kHz"
    task = "vocoder"
    sources = ("original",)
    """The original repository's architecture and checkpoint format, implemented here."""
    variants = (
        V1,
        V2,
        V3,
        tiny_variant("tiny", V1, "test size of 'v1' (resblock \"1\"): 32 initial channels, two residual blocks"),
        tiny_variant("tiny-v3", V3, "test size of 'v3' (resblock \"2\"): 32 initial channels, two residual blocks"),
    )
    sample_rate = 22_050
    input_kind = "mel"
    output = WAVEFORM_OUTPUT
    default_length_range = LengthRange(1.0, 10.0)
    # Waveform samples in [-1, 1] of fp32 XNNPACK against eager PyTorch.
    atol = 1e-3
    # As for the other HiFi-GANs (recipes/_vocoder.py says why): int8-static only; calibrate on speech.
    int8_schemes = ("int8-static",)

    def _build(self, request: BuildRequest[OriginalHifiGanArchitecture]) -> BuiltModel:
        import torch

        from ._hifigan_generator import HifiGanGeneratorWaveform

        if request.weights is None:
            architecture = request.variant.architecture
            torch.manual_seed(request.seed)
            generator = architecture.generator()
            audible_synthetic_init(generator)
            generator.apply_weight_norm()
            provenance = synthetic_provenance(request.variant, request.seed)
            notes: tuple[str, ...] = (
                "synthetic convolution weights are LeCun-normal (std 1/sqrt(fan-in)) so the waveform is audible noise",
            )
        else:
            architecture, generator, provenance, notes = load_checkpoint(request.weights, request.variant)
        mel = architecture.front_end()
        spec = mel_input(mel.sample_rate, mel.hop_length, mel.mel_bins, request.length_range)
        return self._package(request, HifiGanGeneratorWaveform(generator), spec, provenance, notes, mel=mel)


# Loading the original format.


def load_checkpoint(
    weights: str, variant: Variant[OriginalHifiGanArchitecture]
) -> tuple[OriginalHifiGanArchitecture, HifiGanGenerator, str, tuple[str, ...]]:
    """The architecture, the loaded eval-mode generator, the provenance and the build notes of `weights`."""
    return load_generator(weights, variant, locate_checkpoint, read_generator_state, "original HiFi-GAN generator")


ArchitectureT = TypeVar("ArchitectureT", bound="OriginalHifiGanArchitecture")


def load_generator(
    weights: str,
    variant: Variant[ArchitectureT],
    locate: Callable[[str], tuple[Path, Path | None]],
    read_state: Callable[[Path], dict[str, torch.Tensor]],
    described_as: str,
) -> tuple[ArchitectureT, Any, str, tuple[str, ...]]:
    """What `load_checkpoint` does for HiFi-GAN and for the generators that share its checkpoint format
    (BigVGAN): locate the checkpoint and its config, build the architecture the config describes (else the
    variant's), with legacy weight norm when the checkpoint holds `weight_g`/`weight_v`, and load it."""
    checkpoint, config_path = locate(weights)
    if config_path is None:
        architecture, built_from = variant.architecture, f"variant '{variant.name}'"
    else:
        architecture, built_from = read_config(config_path, variant.architecture), str(config_path)
    state = read_state(checkpoint)
    weight_normed = "conv_pre.weight_g" in state
    generator = architecture.generator()
    if weight_normed:
        generator.apply_weight_norm()
    _check_fits(state, generator.state_dict(), checkpoint, built_from, architecture)
    generator.load_state_dict(state)
    notes = []
    if architecture != variant.architecture:
        notes.append(f"architecture from {config_path} ({architecture.summary()}), not variant '{variant.name}'")
    if weight_normed:
        notes.append("every convolution computes its weight from weight_g and weight_v (legacy weight_norm)")
    else:
        notes.append(
            "the checkpoint holds plain convolution weights (saved after remove_weight_norm()): "
            "weight norm is not applied"
        )
    provenance = f"loaded from {checkpoint} ({described_as}, configuration of {built_from})"
    return architecture, generator.eval(), provenance, tuple(notes)


def _is_generator_checkpoint(path: Path) -> bool:
    # Original training writes g_00000000 (generator) and do_00000000 (discriminators and optimizers); the
    # released checkpoints are named generator_v1, generator_universal.pth.tar, ...
    return path.is_file() and (path.name.startswith("g_") or path.name.startswith("generator"))


def locate_checkpoint(weights: str) -> tuple[Path, Path | None]:
    """The generator checkpoint `weights` names and the config.json beside it (None for a file)."""
    path = Path(weights).expanduser()
    if path.is_file():
        return path, None
    if not path.is_dir():
        raise WeightsError(
            f"weights {weights} not found: pass an original HiFi-GAN generator checkpoint (g_* file) "
            "or a directory holding it and its config.json"
        )
    config = path / "config.json"
    if not config.is_file():
        raise WeightsError(
            f"weights directory {weights} has no config.json: put the training config.json beside the generator "
            "checkpoint, or pass the checkpoint file with --variant for its configuration"
        )
    candidates = sorted(p for p in path.iterdir() if _is_generator_checkpoint(p))
    if not candidates:
        discriminators = any(p.name.startswith("do_") for p in path.iterdir())
        held = " (its do_* files hold the discriminators, not the generator)" if discriminators else ""
        raise WeightsError(
            f"weights directory {weights} holds no generator checkpoint (g_* or generator*){held}: "
            "put the generator checkpoint beside config.json"
        )
    if len(candidates) > 1:
        raise WeightsError(
            f"weights directory {weights} holds {len(candidates)} generator checkpoints "
            f"({candidates[0].name}, ..., {candidates[-1].name}): keep one beside config.json, "
            "or pass the checkpoint file with --variant"
        )
    return candidates[0], config


def read_config(path: Path, base: ArchitectureT) -> ArchitectureT:
    """`base` with the architecture and front-end fields of the config.json at `path`: an original HiFi-GAN's, or
    one of a format that extends it (BigVGAN's), read as `base`'s class says (`config_value`, `config_defaults`).
    """
    family = base.family
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WeightsError(f"cannot read {path}: {first_line(error)}") from None
    if not isinstance(config, dict):
        raise WeightsError(f"{path} is not a {family} config: it holds no JSON object")
    overrides: dict[str, object] = dict(base.config_defaults)
    try:
        for field in fields(base):
            if field.name in config:
                overrides[field.name] = base.config_value(field.name, config[field.name])
    except (TypeError, ValueError) as error:
        raise WeightsError(f"{path} is not a {family} generator config: {error}") from None
    architecture = replace(base, **overrides)  # type: ignore[arg-type]
    problem = architecture.problem()
    if problem is not None:
        raise WeightsError(f"{path} describes no {family} generator this recipe builds: {problem}")
    return architecture


def _integer(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} should hold integers, not {value!r}")
    return value


def read_generator_state(path: Path) -> dict[str, torch.Tensor]:
    """The generator state dict of the checkpoint file at `path` (`{"generator": ...}`, or a bare state dict)."""
    return shared_read_generator_state(
        path,
        family="HiFi-GAN",
        wanted="an original HiFi-GAN generator checkpoint",
        discriminators=("mpd", "msd"),
        discriminator_contents="do_*: mpd, msd and optimizer state",
        discriminator_remedy="pass the g_* checkpoint of the same step",
    )


def _check_fits(
    state: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    checkpoint: Path,
    built_from: str,
    architecture: OriginalHifiGanArchitecture,
) -> None:
    """Raise `WeightsMismatchError` unless `state` has exactly the keys and shapes of `expected`."""
    check_fits(
        state,
        expected,
        checkpoint,
        model=f"the generator of {built_from} ({architecture.summary()})",
        layout=_layout(state),
        hint="pass --variant of the configuration it was trained with, or a directory holding it and its config.json",
        entries="parameters",
        built="generator",
    )


def _layout(state: Mapping[str, torch.Tensor]) -> str:
    """What the checkpoint's keys say of its generator: upsampling stages and residual block type."""
    stages = len({key.split(".")[1] for key in state if key.startswith("ups.")})
    if any(".convs1." in key for key in state):
        blocks = 'type "1" residual blocks'
    elif any(key.startswith("resblocks.") and ".convs." in key for key in state):
        blocks = 'type "2" residual blocks'
    else:
        blocks = "no HiFi-GAN residual blocks"
    return f"the checkpoint has {stages} upsampling stages and {blocks}"
