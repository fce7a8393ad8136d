"""Sidecars: every field checked, and checked against the program it sits beside."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from audiodeploy.program.description import DescriptionError, program_digest, read_sidecar, sidecar_content
from audiodeploy.program.mel import MelSpectrogram
from audiodeploy.program.spec import CTC_LOGITS_OUTPUT, WAVEFORM_OUTPUT, InputSpec
from audiodeploy.program.vocabulary import STANDARD_ENGLISH

WAVEFORM = InputSpec("waveform", ("batch", "samples"), 16_000, 1, 320, 8_000, 32_000)
MEL = InputSpec("mel", ("batch", "frames", "mel_bins"), 16_000, 256, 1, 2, 63, 80)


def model_dict(kind: str = "ctc") -> dict:
    ctc = kind == "ctc"
    return {
        "recipe": "wav2vec2" if ctc else "hifigan",
        "variant": "tiny",
        "source": "transformers",
        "weights": "synthetic (seed 0)",
        "sample_rate": 16_000,
        "input": (WAVEFORM if ctc else MEL).to_dict(),
        "output": (CTC_LOGITS_OUTPUT if ctc else WAVEFORM_OUTPUT).to_dict(),
        "length_range_seconds": [0.5, 2.0],
        "atol": 1e-4,
        "vocabulary": STANDARD_ENGLISH.to_dict() if ctc else None,
        "mel": None if ctc else MelSpectrogram("speecht5", 16_000, 80, 256, 1024, 80.0, 7600.0).to_dict(),
        "notes": [],
    }


@dataclass
class Declared:
    dtype: str
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class DeclaredProgram:
    """What a loaded program declares, method by method (`ProgramDescription.check_program` reads it)."""

    methods: dict[str, tuple[list[Declared], list[Declared]]]

    @classmethod
    def forward(cls, inputs: list[Declared], outputs: list[Declared]) -> DeclaredProgram:
        return cls({"forward": (inputs, outputs)})

    @property
    def method_names(self) -> list[str]:
        return sorted(self.methods)

    def input_specs(self, method: str = "forward") -> list[Declared]:
        return self.methods[method][0]

    def output_specs(self, method: str = "forward") -> list[Declared]:
        return self.methods[method][1]


def write_sidecar(tmp_path, model: dict, program: bytes = b"program bytes") -> object:
    pte = tmp_path / "m.pte"
    pte.write_bytes(program)
    (tmp_path / "m.json").write_bytes(sidecar_content(pte, program, model, {"fold": True}))
    return pte


def test_a_sidecar_round_trips_and_knows_its_task(tmp_path):
    pte = write_sidecar(tmp_path, model_dict("ctc"))
    sidecar = read_sidecar(pte)
    assert sidecar.description.task == "ctc-asr"
    assert sidecar.description.vocabulary == STANDARD_ENGLISH
    sidecar.check_digest(program_digest(b"program bytes"), "m.pte")
    assert read_sidecar(write_sidecar(tmp_path, model_dict("vocoder"))).description.task == "vocoder"


def test_a_sidecar_written_for_other_bytes_is_refused(tmp_path):
    sidecar = read_sidecar(write_sidecar(tmp_path, model_dict()))
    with pytest.raises(DescriptionError, match="written for another program"):
        sidecar.check_digest(program_digest(b"a newer program"), "m.pte")


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda c: c.pop("model"), "field 'model'"),
        (lambda c: c["model"].pop("input"), "field 'model.input' is missing"),
        (lambda c: c["model"]["input"].update(kind="video"), "'waveform', 'mel', 'fbank'"),
        (lambda c: c["model"]["input"].update(max_length="many"), "max_length"),
        (lambda c: c["model"].update(vocabulary=None), "vocabulary"),
        (lambda c: c["model"]["output"].update(kind="logits"), "unknown output kind"),
        (lambda c: c["model"].update(length_range_seconds=[1]), "length_range_seconds"),
        (lambda c: c.update(schema="something/2"), "not an audiodeploy sidecar"),
        (lambda c: c.update(program_sha256=7), "program_sha256"),
    ],
)
def test_a_malformed_sidecar_is_one_line_naming_the_field(tmp_path, edit, words):
    pte = write_sidecar(tmp_path, model_dict())
    content = json.loads((tmp_path / "m.json").read_text())
    edit(content)
    (tmp_path / "m.json").write_text(json.dumps(content))
    with pytest.raises(DescriptionError, match=words) as caught:
        read_sidecar(pte)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00", b"[]", b"[" * 100_000])
def test_a_sidecar_that_is_not_json_is_refused(tmp_path, content):
    pte = write_sidecar(tmp_path, model_dict())
    (tmp_path / "m.json").write_bytes(content)
    with pytest.raises(DescriptionError, match="sidecar"):
        read_sidecar(pte)


def test_a_missing_sidecar_or_a_directory_in_its_place_is_refused(tmp_path):
    with pytest.raises(DescriptionError, match="no sidecar"):
        read_sidecar(tmp_path / "m.pte")
    (tmp_path / "m.json").mkdir()
    with pytest.raises(DescriptionError, match="is a directory"):
        read_sidecar(tmp_path / "m.pte")


@pytest.mark.parametrize(
    "inputs, outputs, words",
    [
        ([], [Declared("torch.float32", (1, 100, 32))], "takes 0 inputs"),
        ([Declared("torch.int64", (1, 32_000))], [Declared("torch.float32", (1, 100, 32))], "torch.int64"),
        ([Declared("torch.float32", (1, 16_000))], [Declared("torch.float32", (1, 100, 32))], "at most"),
        ([Declared("torch.float32", (1, 63, 80))], [Declared("torch.float32", (1, 16_128))], "at most"),
        ([Declared("torch.float32", (1, 32_000))], [Declared("torch.float32", (1, 100, 29))], "29 labels"),
    ],
)
def test_a_description_that_does_not_fit_the_program_is_refused(tmp_path, inputs, outputs, words):
    description = read_sidecar(write_sidecar(tmp_path, model_dict())).description
    with pytest.raises(DescriptionError, match=words):
        description.check_program(DeclaredProgram.forward(inputs, outputs), "m.pte")
    with pytest.raises(DescriptionError, match="describes method 'forward'; the program has encode"):
        description.check_program(DeclaredProgram({"encode": ([], [])}), "m.pte")
    fitting = DeclaredProgram.forward(
        [Declared("torch.float32", (1, 32_000))], [Declared("torch.float32", (1, 99, 32))]
    )
    description.check_program(fitting, "m.pte")


def tts_model_dict() -> dict:
    from audiodeploy.program.spec import SPEECH_OUTPUT
    from tests.vits_checkpoint import text_to_speech

    latents = InputSpec("latents", ("batch", "frames", "channels"), 16_000, 256, 1, 2, 1250, 32)
    text = text_to_speech()
    return {
        **model_dict("vocoder"),
        "recipe": "vits",
        "input": latents.to_dict(),
        "output": SPEECH_OUTPUT.to_dict(),
        "mel": None,
        "text": text.to_dict(),
    }


TTS_PROGRAM = {
    "encode": (
        [Declared("torch.int64", (1, 9)), Declared("torch.float32", (1, 2, 9))],
        [
            Declared("torch.float32", (1, 9, 32)),
            Declared("torch.float32", (1, 9, 32)),
            Declared("torch.float32", (1, 9)),
        ],
    ),
    "decode": ([Declared("torch.float32", (1, 1250, 32))], [Declared("torch.float32", (1, 320_000))]),
}


def test_a_text_to_speech_description_checks_both_methods(tmp_path):
    description = read_sidecar(write_sidecar(tmp_path, tts_model_dict())).description
    assert description.task == "tts" and description.method_names == ("encode", "decode")
    description.check_program(DeclaredProgram(TTS_PROGRAM), "m.pte")
    with pytest.raises(DescriptionError, match="describes method 'encode'"):
        description.check_program(DeclaredProgram({"decode": TTS_PROGRAM["decode"]}), "m.pte")
    noise_as_ids = {**TTS_PROGRAM, "encode": ([Declared("torch.int64", (1, 9))] * 2, TTS_PROGRAM["encode"][1])}
    with pytest.raises(DescriptionError, match="its encode method takes"):
        description.check_program(DeclaredProgram(noise_as_ids), "m.pte")
    other_prior = {**TTS_PROGRAM, "encode": (TTS_PROGRAM["encode"][0], TTS_PROGRAM["encode"][1][:2])}
    with pytest.raises(DescriptionError, match="its encode method gives"):
        description.check_program(DeclaredProgram(other_prior), "m.pte")


def test_a_voice_of_several_speakers_takes_a_speaker_index_in_both_methods(tmp_path):
    content = tts_model_dict()
    content["text"]["speakers"] = 4
    description = read_sidecar(write_sidecar(tmp_path, content)).description
    speaker = Declared("torch.int64", (1,))
    (encode_in, encode_out), (decode_in, decode_out) = TTS_PROGRAM["encode"], TTS_PROGRAM["decode"]
    voices = {"encode": (encode_in + [speaker], encode_out), "decode": (decode_in + [speaker], decode_out)}
    description.check_program(DeclaredProgram(voices), "m.pte")
    with pytest.raises(DescriptionError, match="and an int64 \\[1\\] speaker index"):
        description.check_program(DeclaredProgram({**voices, "encode": TTS_PROGRAM["encode"]}), "m.pte")
    with pytest.raises(DescriptionError, match="the sidecar describes 2"):
        description.check_program(DeclaredProgram({**voices, "decode": TTS_PROGRAM["decode"]}), "m.pte")
    float_speaker = {**voices, "decode": (decode_in + [Declared("torch.float32", (1,))], decode_out)}
    with pytest.raises(DescriptionError, match="an int64 \\[1\\] speaker index"):
        description.check_program(DeclaredProgram(float_speaker), "m.pte")


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda m: m.pop("text"), "field 'text' is for text-to-speech programs"),
        (lambda m: m["text"].update(speakers=0), "speakers"),
        (lambda m: m["text"].update(flow_size=16), "text.flow_size"),
        (lambda m: m["text"]["front_end"].update(characters=[]), "distinct tokens"),
    ],
)
def test_a_malformed_text_to_speech_description_is_refused(tmp_path, edit, words):
    pte = write_sidecar(tmp_path, tts_model_dict())
    content = json.loads((tmp_path / "m.json").read_text())
    edit(content["model"])
    (tmp_path / "m.json").write_text(json.dumps(content))
    with pytest.raises(DescriptionError, match=words):
        read_sidecar(pte)
