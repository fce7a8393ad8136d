"""`audiodeploy export --weights DIR` with no recipe named: the recipe from the checkpoint's config.json, the head
it has, and `run` printing what that head gives, as a user sees it."""

from __future__ import annotations

import json

import numpy as np
import soundfile

from tests.cli import assert_clean_error, audiodeploy
from tests.recipes.test_speech_encoders import LABELS, save_checkpoint_with_head


def test_a_classifier_checkpoint_exports_under_its_own_name_and_run_prints_its_labels(tmp_path):
    save_checkpoint_with_head("wav2vec2", "ForSequenceClassification", tmp_path / "my-emotion-model")
    # One length (a second): a fixed-length program lowers in two thirds of a range's time, and runs in windows alike.
    exported = audiodeploy("export", "--weights", "./my-emotion-model", "--seconds", "1", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "Wav2Vec2ForSequenceClassification" in exported.stderr
    sidecar = json.loads((tmp_path / "my-emotion-model.json").read_text())["model"]
    assert (sidecar["recipe"], sidecar["output"]["kind"]) == ("wav2vec2", "class-logits")
    assert sidecar["labels"] == list(LABELS.values())

    t = np.arange(48_000) / 16_000  # 3 s: longer than the program takes, so it runs in windows
    soundfile.write(str(tmp_path / "speech.wav"), 0.3 * np.sin(2 * np.pi * 220 * t), 16_000)
    result = audiodeploy("run", "my-emotion-model.pte", "speech.wav", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(LABELS.values())
    scores = [float(line.split()[1]) for line in lines]
    assert scores == sorted(scores, reverse=True) and abs(sum(scores) - 1) < 2e-3
    assert "synthetic" not in result.stderr  # weights were loaded: no warning that the output is meaningless
    shown = audiodeploy("inspect", "my-emotion-model.pte", cwd=tmp_path)
    assert f"task: audio-classification, 3 labels: {', '.join(LABELS.values())}" in shown.stdout, shown.stderr


def test_a_checkpoint_no_recipe_builds_is_one_line_naming_those_that_are(tmp_path):
    from transformers import BertConfig

    BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8).save_pretrained(
        tmp_path / "bert"
    )
    assert_clean_error(audiodeploy("export", "--weights", str(tmp_path / "bert")), "'bert'", "wav2vec2", "wavlm")
    assert_clean_error(audiodeploy("export"), "name a recipe", "--weights")
    assert not list(tmp_path.glob("*.pte"))
