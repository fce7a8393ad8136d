"""EnCodec's SEANet encoder and decoder with their LSTM's state carried from one window to the next.

A 24 kHz EnCodec is causal: every convolution pads on the left only, so a window of audio gives exactly what one
long run gives, except near the window's start, where the convolutions see the window's edge instead of the audio
before it, and where the LSTM starts from zeros instead of from everything before. Both wrappers here take the
state one long run would have before a given step of the window (`resume_step`) and hand it to the LSTM there:

    window       | contaminated | exact ......................................... |
    LSTM input    0 ─ resume_step ─────────────────────────────────────────── frames
    LSTM          computed        h, c = carried (when resumed), then exact
    outputs       0 ──────── lead ─────────────────────────────────────────── frames   (exact from `lead` on)

and give the LSTM's state after every step, from which the runtime takes the next window's carried state
(`audiodeploy.program.description.CarriedState`). Unresumed (the first window, a flag of 0), the LSTM starts from
zeros at step 0, as one long run does at the audio's start.

`torch.export` unrolls an `nn.LSTM` at the example's length anyway; here it is unrolled by hand so that the state
can be replaced at one step and read at every one: the input projection of every step is one GEMM, and each step
adds its recurrent GEMM and the gates.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from audiodeploy.program.description import CarriedState

if TYPE_CHECKING:
    from transformers import EncodecModel


class CarriedLSTM(nn.Module):
    """`nn.LSTM` (sequence first, unidirectional) over `(1, channels, steps)` plus its input, as EnCodec's
    `EncodecLSTM` computes it, with the state replaced at step `resume_step` by `(h, c)` where `resume` is 1.

    Gives the output `(1, channels, steps)` and the state after every step: `h` and `c`, each `(layers, steps,
    hidden)`."""

    def __init__(self, lstm: nn.LSTM, resume_step: int) -> None:
        super().__init__()
        if lstm.bidirectional or lstm.batch_first or lstm.proj_size or not lstm.bias:
            raise ValueError("a carried LSTM is unidirectional, sequence-first, with biases and no projection")
        self.lstm = lstm
        self.resume_step = resume_step

    def forward(
        self, hidden: torch.Tensor, h: torch.Tensor, c: torch.Tensor, resume: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        sequence = hidden[0].transpose(0, 1)  # (steps, channels)
        steps = sequence.shape[0]
        layer_input = sequence
        hs, cs = [], []
        for layer in range(self.lstm.num_layers):
            weight_ih = getattr(self.lstm, f"weight_ih_l{layer}")
            weight_hh = getattr(self.lstm, f"weight_hh_l{layer}")
            bias = getattr(self.lstm, f"bias_ih_l{layer}") + getattr(self.lstm, f"bias_hh_l{layer}")
            projected = layer_input @ weight_ih.T + bias
            hidden_size = weight_hh.shape[1]
            # Slices, not selects: XNNPACK takes a static slice, and a select would stay outside the delegate.
            h_carried = h[layer : layer + 1].reshape(1, hidden_size)
            c_carried = c[layer : layer + 1].reshape(1, hidden_size)
            # No state before the first step: its recurrent terms are zero, left out rather than computed from
            # zeros (a constant of zeros would stay outside the delegate).
            h_t: torch.Tensor | None = None
            c_t: torch.Tensor | None = None
            outputs, cells = [], []
            for step in range(steps):
                if step == self.resume_step:
                    # Arithmetic, not a select: a flag of exactly 0 or 1 gives either state exactly.
                    h_t = resume * h_carried if h_t is None else resume * h_carried + (1 - resume) * h_t
                    c_t = resume * c_carried if c_t is None else resume * c_carried + (1 - resume) * c_t
                gates = projected[step : step + 1] if h_t is None else projected[step : step + 1] + h_t @ weight_hh.T
                input_gate, forget_gate, cell_gate, output_gate = gates.chunk(4, dim=1)
                update = torch.sigmoid(input_gate) * torch.tanh(cell_gate)
                c_t = update if c_t is None else torch.sigmoid(forget_gate) * c_t + update
                h_t = torch.sigmoid(output_gate) * torch.tanh(c_t)
                outputs.append(h_t)
                cells.append(c_t)
            layer_input = torch.cat(outputs)
            hs.append(layer_input[None])
            cs.append(torch.cat(cells)[None])
        output = (layer_input + sequence).transpose(0, 1)[None]
        return output, _joined(hs), _joined(cs)


def _joined(layers: list[torch.Tensor]) -> torch.Tensor:
    # One layer's state as it is: a concatenation of one tensor would stay outside the delegate.
    return layers[0] if len(layers) == 1 else torch.cat(layers)


def contaminated_steps(layers: nn.Module, contaminated: int) -> int:
    """How many steps at the start of `layers`' output differ from one long run's, when the first `contaminated`
    steps of their input do: every causal `nn.Conv1d` (EnCodec pads it on the left by `(kernel - 1) * dilation -
    (stride - 1)`) and causal `nn.ConvTranspose1d` (trimmed on the right) in `layers`, in order. A residual block's
    shortcut is a 1-wide convolution, which reaches no further back than its main path."""
    for module in layers.modules():
        if isinstance(module, nn.Conv1d):
            (kernel,), (stride,), (dilation,) = module.kernel_size, module.stride, module.dilation
            padding = (kernel - 1) * dilation - (stride - 1)
            contaminated = math.ceil((contaminated + padding) / stride)
        elif isinstance(module, nn.ConvTranspose1d):
            (kernel,), (stride,) = module.kernel_size, module.stride
            contaminated = (contaminated + math.ceil(kernel / stride) - 1) * stride
    return contaminated


def _split_at_lstm(layers: nn.ModuleList) -> tuple[nn.Sequential, nn.LSTM, nn.Sequential]:
    index = next(i for i, layer in enumerate(layers) if isinstance(getattr(layer, "lstm", None), nn.LSTM))
    return nn.Sequential(*layers[:index]), layers[index].lstm, nn.Sequential(*layers[index + 1 :])


class CarriedWindow(nn.Module):
    """A method of one window around a `CarriedLSTM`, with what the runtime needs to carry its state."""

    lstm: CarriedLSTM
    lead: int
    """Steps at the window's start whose outputs differ from the long run's, resumed."""

    @property
    def carried(self) -> CarriedState:
        lstm = self.lstm.lstm
        shape = (lstm.num_layers, lstm.hidden_size)
        return CarriedState(shapes=(shape, shape), resume_step=self.lstm.resume_step, lead=self.lead)


def carried_state(module: nn.Module) -> CarriedState | None:
    """What `module` carries from window to window, if it is a `CarriedWindow`."""
    return module.carried if isinstance(module, CarriedWindow) else None


class EncodecEncodeCarried(CarriedWindow):
    """`(1, samples)` float32 waveform, the carried `h` and `c` (`(layers, 1, hidden)`) and a `(1, 1)` resume
    flag → `(1, frames, codebooks)` int64 codes at `bandwidth` kbps, and the LSTM's `h` and `c` after every frame
    (`(layers, frames, hidden)`): a causal (24 kHz) `EncodecModel`'s encoder, one window."""

    def __init__(self, model: EncodecModel, bandwidth: float) -> None:
        super().__init__()
        self.before, lstm, self.after = _split_at_lstm(model.encoder.layers)
        self.lstm = CarriedLSTM(lstm, contaminated_steps(self.before, 0))
        self.lead = contaminated_steps(self.after, self.lstm.resume_step)
        self.quantizer = model.quantizer
        self.bandwidth = bandwidth

    def forward(
        self, waveform: torch.Tensor, h: torch.Tensor, c: torch.Tensor, resume: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden, hs, cs = self.lstm(self.before(waveform[:, None]), h, c, resume)
        codes = self.quantizer.encode(self.after(hidden), self.bandwidth)
        return codes.permute(1, 2, 0), hs, cs


class EncodecDecodeCarried(CarriedWindow):
    """`(1, frames, codebooks)` int64 codes, the carried `h` and `c` and a resume flag → `(1, frames * hop)` float32
    waveform and the LSTM's state after every frame: a causal `EncodecModel`'s decoder, one window."""

    def __init__(self, model: EncodecModel) -> None:
        super().__init__()
        self.before, lstm, self.after = _split_at_lstm(model.decoder.layers)
        self.lstm = CarriedLSTM(lstm, contaminated_steps(self.before, 0))
        samples = contaminated_steps(self.after, self.lstm.resume_step)
        self.lead = math.ceil(samples / int(model.config.hop_length))
        self.quantizer = model.quantizer

    def forward(
        self, codes: torch.Tensor, h: torch.Tensor, c: torch.Tensor, resume: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        embeddings = self.quantizer.decode(codes.permute(2, 0, 1))
        hidden, hs, cs = self.lstm(self.before(embeddings), h, c, resume)
        return self.after(hidden)[:, 0], hs, cs
