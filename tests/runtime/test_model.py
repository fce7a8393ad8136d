"""`audiodeploy.runtime.load`: a program and its description, run on inputs of any length in windows.

The programs are purely convolutional stand-ins (tests/runtime/programs.py), lowered for real: run in windows, they
must give exactly what the module gives on the whole input, which is what proves the stitching."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import soundfile
import torch

from audiodeploy import runtime
from audiodeploy.program.description import DescriptionError
from audiodeploy.program.vocabulary import STANDARD_ENGLISH
from tests.runtime.programs import HOP, LABELS, MEL, RATE, STRIDE, VOCODER_SPEC, export


@pytest.fixture(scope="module")
def ctc(tmp_path_factory):
    return export("ctc", tmp_path_factory.mktemp("ctc"))


@pytest.fixture(scope="module")
def vocoder(tmp_path_factory):
    return export("vocoder", tmp_path_factory.mktemp("vocoder"))


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * (200 + 50 * np.sin(t)) * t) + 0.05 * rng.standard_normal(t.size)).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """The stand-in of each other head a speech encoder checkpoint may carry: kind -> (path, module)."""
    directory = tmp_path_factory.mktemp("heads")
    return {kind: export(kind, directory) for kind in ("classifier", "frame-classifier", "features", "embedding")}


def test_load_knows_the_task(ctc, vocoder, heads):
    assert isinstance(runtime.load(ctc[0]), runtime.SpeechRecognizer)
    assert isinstance(runtime.load(vocoder[0]), runtime.Vocoder)
    assert isinstance(runtime.load(heads["classifier"][0]), runtime.AudioClassifier)
    assert isinstance(runtime.load(heads["frame-classifier"][0]), runtime.AudioClassifier)
    assert isinstance(runtime.load(heads["features"][0]), runtime.FeatureExtractor)
    assert isinstance(runtime.load(heads["embedding"][0]), runtime.FeatureExtractor)


def test_a_long_recording_is_transcribed_in_windows_exactly_as_the_whole(ctc):
    path, module = ctc
    audio = speech_like(10.3)  # 20 times the longest input of the program
    model = runtime.load(path)
    transcript = model.transcribe(audio)
    padded = np.zeros(-(-audio.size // 20) * 20, dtype=np.float32)  # the runtime pads to whole frames
    padded[: audio.size] = audio
    with torch.no_grad():
        expected = module(torch.from_numpy(padded).unsqueeze(0))[0].argmax(-1).tolist()
    assert transcript.windows > 20
    assert list(transcript.labels) == expected
    assert len(expected) == padded.size // 20 - 1
    assert transcript.text == STANDARD_ENGLISH.decode_ids(expected)


def test_window_and_overlap_options_change_the_runs_not_the_result(ctc):
    model = runtime.load(ctc[0])
    audio = speech_like(3.0, seed=1)
    default = model.transcribe(audio)
    other = model.transcribe(audio, window_seconds=0.3, overlap_seconds=0.1)
    assert other.windows > default.windows and other.labels == default.labels
    short = model.transcribe(audio[:1000])  # shorter than the program's minimum: padded, one window
    assert short.windows == 1 and len(short.labels) == 1000 // 20 - 1


def test_a_descriptions_window_overlap_is_the_overlap_when_none_is_given(ctc, tmp_path):
    """A recurrent model's recipe asks for more overlap than the default fifth (EnCodec's LSTM): the sidecar says so,
    and the runtime's windows follow it, unless the user gives an overlap."""
    shutil.copy(ctc[0], tmp_path / "m.pte")
    sidecar = json.loads(ctc[0].with_suffix(".json").read_text())
    sidecar["model"]["window_overlap"] = 0.6
    (tmp_path / "m.json").write_text(json.dumps(sidecar))
    default, recurrent = runtime.load(ctc[0]), runtime.load(tmp_path / "m.pte")
    total = 5 * default.spec.max_length
    first, second = default.plan(total, None, None).windows[:2]
    assert second.start - first.start == first.units - first.units // 5  # windows advance by what they do not share
    first, second = recurrent.plan(total, None, None).windows[:2]
    assert second.start - first.start == first.units - math.floor(first.units * 0.6)
    assert recurrent.plan(total, None, 0.1).windows == default.plan(total, None, 0.1).windows
    sidecar["model"]["window_overlap"] = 1.0
    (tmp_path / "m.json").write_text(json.dumps(sidecar))
    with pytest.raises(DescriptionError, match="'window_overlap' should be a share of a window"):
        runtime.load(tmp_path / "m.pte")


@pytest.mark.parametrize(
    "window, overlap, words",
    [
        (5.0, None, "does not fit"),
        (0.01, None, "does not fit"),
        (0.4, 0.4, "less than the window"),
        (-1, None, "positive"),
    ],
)
def test_windows_that_do_not_fit_the_program_are_refused(ctc, window, overlap, words):
    with pytest.raises(runtime.WindowOptionError, match=words):
        runtime.load(ctc[0]).transcribe(speech_like(1.0), window_seconds=window, overlap_seconds=overlap)


def test_a_long_mel_is_vocoded_in_windows_exactly_as_the_whole(vocoder, tmp_path):
    path, module = vocoder
    frames = 2_345  # more than 11 windows of the program's longest input
    mel = torch.randn(1, frames, VOCODER_SPEC.feature_size, generator=torch.Generator().manual_seed(3))
    model = runtime.load(path)
    waveform = model.vocode(mel)
    with torch.no_grad():
        expected = module(mel)[0]
    assert waveform.windows > 10 and waveform.samples.numel() == frames * HOP
    torch.testing.assert_close(waveform.samples, expected, atol=1e-5, rtol=1e-4)  # no seam differs from the whole
    np.save(tmp_path / "mel.npy", mel[0].numpy())
    written = model.vocode_to_file(tmp_path / "mel.npy", tmp_path / "out.wav")
    audio, rate = soundfile.read(str(tmp_path / "out.wav"), dtype="float32")
    assert rate == RATE and audio.size == written.samples == frames * HOP
    np.testing.assert_allclose(audio, expected.numpy(), atol=2 / 32768)


def test_audio_is_vocoded_through_the_descriptions_mel_front_end(vocoder, tmp_path):
    model = runtime.load(vocoder[0])
    audio = speech_like(2.0)
    soundfile.write(str(tmp_path / "speech.wav"), audio, RATE, subtype="FLOAT")
    from_file = model.vocode(tmp_path / "speech.wav")
    from_mel = model.vocode(MEL(audio))
    assert from_file.samples.numel() == MEL.frame_count(audio.size) * HOP
    torch.testing.assert_close(from_file.samples, from_mel.samples, atol=1e-5, rtol=1e-4)


def test_non_finite_or_misshapen_mels_are_refused(vocoder, tmp_path):
    model = runtime.load(vocoder[0])
    mel = np.zeros((50, VOCODER_SPEC.feature_size), dtype=np.float32)
    mel[40, 3] = np.nan
    with pytest.raises(runtime.AudioInputError, match="frame 40"):
        model.vocode(mel)
    with pytest.raises(runtime.AudioInputError, match=r"takes \(frames, 16\)"):
        model.vocode(np.zeros((50, 15), dtype=np.float32))
    np.save(tmp_path / "c.npy", np.zeros((50, 16), dtype=np.complex64))
    with pytest.raises(runtime.AudioInputError, match="complex"):
        model.vocode(tmp_path / "c.npy")


def test_a_program_without_a_sidecar_can_still_run(ctc, tmp_path):
    bare = tmp_path / "bare.pte"
    bare.write_bytes(ctc[0].read_bytes())
    model = runtime.load(bare)
    assert type(model) is runtime.Model and model.task is None
    assert model.run([torch.zeros(1, 4000)])[0].shape == (1, 199, 32)


def test_a_sidecar_of_another_program_is_refused(ctc, vocoder, tmp_path):
    swapped = tmp_path / "ctc.pte"
    swapped.write_bytes(ctc[0].read_bytes())
    (tmp_path / "ctc.json").write_bytes(vocoder[0].with_suffix(".json").read_bytes())
    with pytest.raises(DescriptionError, match="written for another program"):
        runtime.load(swapped)
    content = json.loads(vocoder[0].with_suffix(".json").read_text())
    del content["program_sha256"]  # an old sidecar: its fields must still match the program
    (tmp_path / "ctc.json").write_text(json.dumps(content))
    with pytest.raises(DescriptionError, match="does not describe this program"):
        runtime.load(swapped)


def test_running_a_program_imports_no_recipe_and_no_model_library(ctc, tmp_path):
    soundfile.write(str(tmp_path / "speech.wav"), speech_like(1.5), RATE)
    script = f"""
        import sys
        import audiodeploy.runtime as r
        print(r.load({str(ctc[0])!r}).transcribe({str(tmp_path / "speech.wav")!r}).text)
        loaded = [m for m in ("transformers", "torchaudio", "audiodeploy.recipes", "audiodeploy.lowering") if m in sys.modules]
        assert not loaded, loaded
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr


def test_memory_stays_flat_however_long_the_file(ctc, tmp_path):
    """Transcribing ten minutes takes no more memory than one minute: the file is read window by window."""
    rng = np.random.default_rng(0)
    for minutes in (1, 10):
        samples = (0.1 * rng.standard_normal(minutes * 60 * RATE)).astype(np.float32)
        soundfile.write(str(tmp_path / f"{minutes}.wav"), samples, RATE, subtype="PCM_16")
    script = """
        import resource, sys
        import audiodeploy.runtime as r
        model = r.load(sys.argv[1])
        model.transcribe(sys.argv[2])  # warm: every buffer a window needs exists now
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        transcript = model.transcribe(sys.argv[3])
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, transcript.windows)
    """
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(ctc[0]), str(tmp_path / "1.wav"), str(tmp_path / "10.wav")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    growth_kib, windows = map(int, result.stdout.split())
    assert windows > 1000
    # Reading the whole file as float32 would take 38 MB; labels for ten minutes take about 1 MB.
    assert growth_kib < 12 * 1024, f"memory grew by {growth_kib} KiB"


def _eager(module: torch.nn.Module, audio: np.ndarray) -> np.ndarray:
    padded = np.zeros(-(-audio.size // STRIDE) * STRIDE, dtype=np.float32)  # the runtime pads to whole frames
    padded[: audio.size] = audio
    with torch.no_grad():
        return module(torch.from_numpy(padded).unsqueeze(0))[0].numpy()


def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def test_a_classifier_gives_the_label_probabilities_of_its_logits(heads):
    path, module = heads["classifier"]
    audio = speech_like(0.4)  # one window
    result = runtime.load(path).classify(audio)
    np.testing.assert_allclose(result.scores, _softmax(_eager(module, audio)), atol=1e-5)
    assert result.labels == LABELS and result.frame_seconds is None and result.windows == 1
    top = result.top(2)
    assert [label for label, _ in top] == [LABELS[i] for i in np.argsort(-result.scores)[:2]]
    assert top[0][1] == pytest.approx(float(result.scores.max()))


def test_a_long_input_is_classified_as_the_mean_of_its_windows_weighted_by_the_audio_each_covers(heads):
    path, module = heads["classifier"]
    model = runtime.load(path)
    audio = speech_like(1.3, seed=3)
    result = model.classify(audio)
    plan = model.plan(audio.size, None, None)
    expected = sum(
        _softmax(_eager(module, audio[w.start * STRIDE : (w.start + w.units) * STRIDE])) * w.kept for w in plan.windows
    ) / sum(w.kept for w in plan.windows)
    assert result.windows == len(plan.windows) > 1
    np.testing.assert_allclose(result.scores, expected, atol=1e-5)
    assert result.scores.sum() == pytest.approx(1.0, abs=1e-5)


def test_a_frame_classifier_scores_every_frame_exactly_as_the_whole_input(heads):
    path, module = heads["frame-classifier"]
    audio = speech_like(2.1, seed=1)  # four times the longest input
    result = runtime.load(path).classify(audio)
    expected = _softmax(_eager(module, audio))
    assert result.windows > 3 and result.frame_seconds == STRIDE / RATE
    np.testing.assert_allclose(result.scores, expected, atol=1e-5)
    segments = result.segments()
    assert segments[0].start_seconds == 0 and segments[-1].end_seconds == pytest.approx(len(expected) * STRIDE / RATE)
    assert all(a.end_seconds == b.start_seconds and a.label != b.label for a, b in zip(segments, segments[1:]))
    assert [segment.label for segment in segments] == [
        label for label, _ in itertools.groupby(LABELS[i] for i in expected.argmax(-1))
    ]


def test_features_are_the_hidden_states_of_every_frame_or_one_embedding(heads):
    path, module = heads["features"]
    audio = speech_like(1.7, seed=2)
    features = runtime.load(path).features(audio)
    np.testing.assert_allclose(features, _eager(module, audio), atol=1e-5)
    path, module = heads["embedding"]
    short = speech_like(0.3)
    embedding = runtime.load(path).features(short)
    assert embedding.shape == (12,)
    np.testing.assert_allclose(embedding, _eager(module, short), atol=1e-5)


def test_a_classifier_sidecar_must_name_as_many_labels_as_the_program_scores(heads, tmp_path):
    path, _ = heads["classifier"]
    copy = tmp_path / "classifier.pte"
    copy.write_bytes(path.read_bytes())
    content = json.loads(path.with_suffix(".json").read_text())
    content["model"]["labels"] = content["model"]["labels"][:3]
    (tmp_path / "classifier.json").write_text(json.dumps(content))
    with pytest.raises(DescriptionError, match="scores 4 labels, the sidecar names 3"):
        runtime.load(copy)
    del content["model"]["labels"]
    (tmp_path / "classifier.json").write_text(json.dumps(content))
    with pytest.raises(DescriptionError, match="labels"):
        runtime.load(copy)


# A program whose input is filterbanks, not a waveform: wav2vec2-bert's tiny layout with the adapter (one output
# frame per two 20 ms rows), the one lowering of that recipe in the suite. The runtime computes the rows from audio
# with the description's model-free front end (`Fbank`), window by window.


@pytest.fixture(scope="module")
def fbank_ctc(tmp_path_factory):
    from audiodeploy._files import atomic_write_files
    from audiodeploy.program.description import sidecar_content, sidecar_path
    from tests.pipeline import lowered_tiny_recipe

    built, lowered = lowered_tiny_recipe("wav2vec2-bert", "tiny-adapter")
    path = tmp_path_factory.mktemp("fbank") / "wav2vec2-bert.pte"
    sidecar = sidecar_content(path, lowered.buffer, built.describe(), lowered.report.to_dict())
    atomic_write_files({path: lowered.buffer, sidecar_path(path): sidecar})
    return path, built, lowered


def test_fp32_fbank_program_lowers_with_every_gemm_delegated_and_matches_eager(fbank_ctc):
    """Measured when the recipe was added: 11 delegates, every GEMM inside; outside them the reshapes, expands and
    slices around the relative-position attention (view_copy x20, expand_copy x8, slice_copy x4, unsqueeze_copy x4);
    3e-7 from eager at 50, 250 and 500 rows."""
    _, built, lowered = fbank_ctc
    report = lowered.report.methods["forward"]
    assert report.gemms_not_delegated == () and report.not_folded == ()
    assert not {"aten.convolution", "aten.linear", "aten.addmm", "aten.mm"} & set(report.ops_outside_delegates)
    program = runtime.load(fbank_ctc[0])
    for length in (built.input.min_length, built.input.max_length):
        (rows,) = built.random_inputs(length, seed=length)
        with torch.no_grad():
            expected = built.module(rows)
        torch.testing.assert_close(program.run([rows])[0], expected, atol=built.atol, rtol=0)


def test_audio_is_transcribed_through_the_descriptions_filterbank_front_end(fbank_ctc):
    path, built, _ = fbank_ctc
    model = runtime.load(path)
    assert isinstance(model, runtime.SpeechRecognizer) and model.spec.kind == "fbank"
    fbank = model.description.fbank
    assert fbank is not None and fbank == built.fbank
    audio = speech_like(1.5)
    transcript = model.transcribe(audio)
    rows = fbank(audio)  # 148 frames: 74 rows, 37 output frames, one window
    assert transcript.windows == 1 and rows.shape == (1, 74, 160)
    logits = model.run([rows])[0]
    assert transcript.labels == tuple(logits[0].argmax(-1).tolist())
    assert transcript.text == STANDARD_ENGLISH.decode(logits)
    # Longer than the program's 10 s: windows, each normalized over itself; every output frame once.
    long = model.transcribe(speech_like(12.3, seed=1))
    assert long.windows == 2 and len(long.labels) == fbank.frame_count(int(12.3 * RATE)) // 2 == 307
    # Shorter than the program's 1 s (19 rows): padded with their mean row up to its 50; 10 frames kept.
    short = model.transcribe(speech_like(0.4))
    assert short.windows == 1 and len(short.labels) == 10


def test_audiodeploy_run_prints_the_transcript_of_a_filterbank_program(fbank_ctc, tmp_path):
    from tests.cli import audiodeploy

    wav = tmp_path / "speech.wav"
    soundfile.write(str(wav), speech_like(2.0), RATE)
    result = audiodeploy("run", str(fbank_ctc[0]), str(wav))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == runtime.load(fbank_ctc[0]).transcribe(wav).text.strip()


@pytest.mark.parametrize(
    "speakers, speaker, words",
    [(1, 1, "one speaker: leave the speaker out"), (3, 3, "which has speakers 0 to 2"), (3, -1, "not a speaker's")],
)
def test_a_voice_names_the_speakers_its_program_has(speakers, speaker, words):
    from tests.vits_checkpoint import text_to_speech

    text = text_to_speech(speakers=speakers)
    assert [a.tolist() for a in runtime.Voice().speaker_inputs(text)] == ([] if speakers == 1 else [[0]])
    with pytest.raises(runtime.TextError, match=words):
        runtime.Voice(speaker=speaker).speaker_inputs(text)
