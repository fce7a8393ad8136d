"""Text to speech through the command line: `run vits.pte "text" -o x.wav` as a user runs it, and its mistakes."""

from __future__ import annotations

import soundfile

from tests.cli import assert_clean_error, audiodeploy, snapshot


def test_run_speaks_text_into_a_wav(tts_model, tmp_path):
    target = tmp_path / "fox.wav"
    result = audiodeploy("run", str(tts_model), "The quick brown fox.", "-o", str(target))
    assert result.returncode == 0, result.stderr
    audio, rate = soundfile.read(target)
    assert rate == 16_000 and audio.size > 16_000 * 0.3
    assert f"wrote {target}" in result.stdout or "wrote" in result.stdout


def test_run_speaks_a_text_file_beside_it(tts_model, tmp_path):
    story = tmp_path / "story.txt"
    story.write_text("First sentence. Second sentence!\n\nA new paragraph", encoding="utf-8")
    result = audiodeploy("run", str(tts_model), "--text-file", str(story), "--seed", "3", "--speaking-rate", "1.5")
    assert result.returncode == 0, result.stderr
    assert soundfile.info(tmp_path / "story.wav").frames > 0


def test_synthetic_voice_says_its_speech_is_noise():
    """`export vits` without --weights says so when it builds (and `run` says so of every synthetic program)."""
    from audiodeploy import recipes

    assert any("the speech is noise" in note for note in recipes.get("vits").build(variant="tiny").notes)


def test_text_mistakes_are_one_line_and_leave_files_alone(tts_model, tmp_path):
    (tmp_path / "keep.wav").write_bytes(b"mine")
    before = snapshot(tmp_path)
    program = str(tts_model)
    keep = str(tmp_path / "keep.wav")
    cases = [
        (("run", program, "-o", keep), "give the input"),
        (("run", program, "hello", "--text-file", str(tmp_path / "t.txt"), "-o", keep), "not both"),
        (("run", program, "!!!", "-o", keep), "nothing in '!!!'"),
        (("run", program, "hello", "--speaking-rate", "0", "-o", keep), "not a speed"),
        (("run", program, "hello", "--seed", "-1", "-o", keep), "seed -1"),
        (("run", program, "hello", "-o", str(tmp_path / "x.npy")), "writes a wav"),
        (("run", program, "--text-file", str(tmp_path / "missing.txt")), "no such file"),
        (("run", program, "", "-o", keep), "the text is empty"),
        (("run", program, keep, "-o", str(tmp_path / "y.wav")), f"{keep} names a file"),
        (("run", program, "hello", "--speaker", "3", "-o", keep), "speakers 0 to 2"),
        (("run", program, "hello", "--speaker", "-1", "-o", keep), "not a speaker's index"),
    ]
    for arguments, words in cases:
        assert_clean_error(audiodeploy(*arguments), words)
    assert snapshot(tmp_path) == before


def test_speech_options_are_refused_for_other_programs(vocoder_model, tmp_path):
    result = audiodeploy("run", str(vocoder_model), "x.npy", "--seed", "3")
    assert_clean_error(result, "text-to-speech programs")
