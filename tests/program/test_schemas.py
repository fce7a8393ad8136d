"""The JSON Schemas of the typed records, checked in under audiodeploy/program/schemas/: each is what its record
generates (regenerate them with ``python -m tests.program.test_schemas``), and the documents audiodeploy writes
follow them: the sidecar of a real export, every bench record under benchmarks/results/. (The native runner's
report is validated where its tests run it, tests/native/test_host_runner.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

from audiodeploy.bench.results import SCHEMA as BENCH_SCHEMA
from audiodeploy.bench.results import BenchRecord
from audiodeploy.native.run import RunnerReport
from audiodeploy.program.description import Sidecar, read_sidecar
from audiodeploy.program.records import schema_text

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "audiodeploy" / "program" / "schemas"
RESULTS = ROOT / "benchmarks" / "results"
REGENERATE = "python -m tests.program.test_schemas"

RECORDS: dict[str, tuple[type, str]] = {
    "sidecar.schema.json": (Sidecar, "urn:audiodeploy:sidecar/1"),
    "bench-record.schema.json": (BenchRecord, "urn:audiodeploy:bench/1"),
    "runner-report.schema.json": (RunnerReport, "urn:audiodeploy:runner/1"),
}
"""Each checked-in schema file: the record it is generated from, and its $id."""


def schema(name: str) -> dict:
    """A checked-in schema, itself checked against draft 2020-12."""
    loaded = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(loaded)
    return loaded


def validate(document: object, name: str) -> None:
    jsonschema.Draft202012Validator(schema(name)).validate(document)


def bench_records() -> list[Path]:
    return [
        path
        for path in sorted(RESULTS.glob("*.json"))
        if json.loads(path.read_text(encoding="utf-8")).get("schema") == BENCH_SCHEMA
    ]


@pytest.mark.parametrize("name", RECORDS)
def test_the_checked_in_schema_is_what_its_record_generates(name):
    record, schema_id = RECORDS[name]
    path = SCHEMAS / name
    assert path.is_file(), f"{path} is missing; generate it: {REGENERATE}"
    assert path.read_text(encoding="utf-8") == schema_text(record, schema_id), (
        f"{path} is not what {record.__name__} generates; regenerate the schemas: {REGENERATE}"
    )


def test_the_sidecars_of_real_exports_follow_the_schema_and_read_back_as_written(asr_model, vocoder_model):
    for program in (asr_model, vocoder_model):
        text = program.with_suffix(".json").read_text(encoding="utf-8")
        validate(json.loads(text), "sidecar.schema.json")
        sidecar = read_sidecar(program)
        assert sidecar.to_json() == text  # what the exporter wrote is the record, key for key
        assert Sidecar.from_json(text) == sidecar
        assert sidecar.description.max_abs_diff_vs_eager is not None  # a field, written by the export


def test_a_sidecar_the_schema_refuses_the_reader_refuses_too(asr_model):
    document = json.loads(asr_model.with_suffix(".json").read_text(encoding="utf-8"))
    document["model"]["colour"] = "blue"
    with pytest.raises(jsonschema.ValidationError, match="colour"):
        validate(document, "sidecar.schema.json")
    with pytest.raises(ValueError, match="field 'model.colour' is unknown"):
        Sidecar.from_dict(document)
    del document["model"]["colour"], document["model"]["atol"]
    with pytest.raises(jsonschema.ValidationError, match="atol"):
        validate(document, "sidecar.schema.json")
    with pytest.raises(ValueError, match="field 'model.atol' is missing"):
        Sidecar.from_dict(document)


@pytest.mark.parametrize("path", bench_records(), ids=lambda path: path.stem)
def test_the_checked_in_bench_records_follow_the_schema_and_read(path):
    text = path.read_text(encoding="utf-8")
    document = json.loads(text)
    validate(document, "bench-record.schema.json")
    written = BenchRecord.from_dict(document).to_dict()
    # Byte for byte, but for the figures added after the record was made, which a record now writes as null.
    added_later = {"snr_db_vs_eager", "argmax_agreement_vs_eager", "vector_extensions"}
    assert _without_nulls(written, added_later) == _without_nulls(document, added_later)
    if written == document:
        assert BenchRecord.from_dict(document).to_json() == text


def _without_nulls(value: object, keys: set[str]) -> object:
    if isinstance(value, dict):
        return {k: _without_nulls(v, keys) for k, v in value.items() if not (k in keys and v is None)}
    if isinstance(value, list):
        return [_without_nulls(v, keys) for v in value]
    return value


def write_schemas() -> None:
    """Regenerate every checked-in schema from its record."""
    SCHEMAS.mkdir(exist_ok=True)
    for name, (record, schema_id) in RECORDS.items():
        (SCHEMAS / name).write_text(schema_text(record, schema_id), encoding="utf-8")
        print(f"wrote {(SCHEMAS / name).relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    write_schemas()
