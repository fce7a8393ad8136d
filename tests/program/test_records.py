"""Typed records (audiodeploy.program.records): what they write, what they refuse, and the schema they derive."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import jsonschema
import pytest

from audiodeploy.program.records import NOT_IN_JSON, OMITTED_WHEN_NONE, Record, json_key, json_schema


@dataclass(frozen=True, kw_only=True)
class Board(Record):
    kind: Literal["board"]
    cores: int
    cpu: str | None = field(default=None, metadata=OMITTED_WHEN_NONE)


@dataclass(frozen=True, kw_only=True)
class Phone(Record):
    kind: Literal["phone"]
    serial: str | None


@dataclass(frozen=True, kw_only=True)
class Run(Record):
    """A run on one device."""

    schema: Literal["test.run/1"] = "test.run/1"
    device: Board | Phone
    latencies_s: tuple[float, ...]
    span: tuple[float, float]
    counts: dict[str, int] = field(metadata=json_key("counts_by_name"))
    added_later: float | None = None
    origin: str = field(default="here", compare=False, metadata=NOT_IN_JSON)

    def __post_init__(self) -> None:
        if self.span[0] > self.span[1]:
            raise ValueError("field 'span' is inverted")


DOCUMENT = {
    "schema": "test.run/1",
    "device": {"kind": "phone", "serial": None},
    "latencies_s": [1, 0.5],
    "span": [0.0, 2.0],
    "counts_by_name": {"a": 1},
    "added_later": None,
}


def test_a_record_writes_its_fields_in_order_and_reads_them_back():
    run = Run.from_dict(DOCUMENT)
    assert run.device == Phone(kind="phone", serial=None) and run.counts == {"a": 1}
    assert run.latencies_s == (1, 0.5) and isinstance(run.latencies_s[0], int)  # a number is kept as written
    assert run.to_dict() == DOCUMENT and list(run.to_dict()) == list(DOCUMENT)
    assert Run.from_json(run.to_json()) == run
    board = Run.from_dict({**DOCUMENT, "device": {"kind": "board", "cores": 4}})
    assert board.device == Board(kind="board", cores=4) and board.to_dict()["device"] == {"kind": "board", "cores": 4}


def test_a_field_added_later_may_be_absent_and_the_schema_constant_may_not():
    old = {key: value for key, value in DOCUMENT.items() if key != "added_later"}
    assert Run.from_dict(old).added_later is None
    with pytest.raises(ValueError, match="field 'schema' is missing"):
        Run.from_dict({key: value for key, value in DOCUMENT.items() if key != "schema"})


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"schema": "test.run/2"}, "field 'schema' should be 'test.run/1', not 'test.run/2'"),
        ({"latencies_s": [1, "2"]}, r"field 'latencies_s\[1\]' should be a number, not '2'"),
        ({"latencies_s": [True]}, r"field 'latencies_s\[0\]' should be a number, not True"),
        ({"span": [1.0]}, "field 'span' should be a list of 2 items"),
        ({"span": [2.0, 1.0]}, "field 'span' is inverted"),
        ({"counts_by_name": {"a": 1.5}}, "field 'counts_by_name.a' should be an integer, not 1.5"),
        ({"counts": {}}, "field 'counts' is unknown"),
        ({"device": {"kind": "phone"}}, "field 'device.serial' is missing"),
        ({"device": {"kind": "tablet"}}, "field 'device' is not a Board or Phone"),
        ({"device": {"kind": "board", "cores": 4, "serial": None}}, "field 'device.serial' is unknown"),
    ],
)
def test_a_malformed_document_names_the_field(edit, message):
    with pytest.raises(ValueError, match=message):
        Run.from_dict({**DOCUMENT, **edit})


def test_the_schema_says_what_the_reader_reads():
    schema = json_schema(Run, "urn:test:run/1")
    assert schema["title"] == "Run" and schema["description"] == "A run on one device."
    assert schema["required"] == ["schema", "device", "latencies_s", "span", "counts_by_name"]
    assert "origin" not in schema["properties"] and schema["$defs"]["Board"]["required"] == ["kind", "cores"]
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(DOCUMENT)
    for wrong in ({"counts": {}}, {"span": [1.0]}, {"device": {"kind": "tablet"}}, {"latencies_s": [True]}):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate({**DOCUMENT, **wrong})
