"""Typed reads of JSON dictionaries (sidecars), with a clear error for a malformed field."""

from __future__ import annotations

from collections.abc import Mapping


def _get(data: Mapping[str, object], key: str) -> object:
    if key not in data:
        raise ValueError(f"field '{key}' is missing")
    return data[key]


def int_field(data: Mapping[str, object], key: str) -> int:
    value = _get(data, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"field '{key}' should be an integer, not {value!r}")
    return value


def optional_int_field(data: Mapping[str, object], key: str) -> int | None:
    return None if _get(data, key) is None else int_field(data, key)


def float_field(data: Mapping[str, object], key: str) -> float:
    value = _get(data, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"field '{key}' should be a number, not {value!r}")
    return float(value)


def optional_float_field(data: Mapping[str, object], key: str) -> float | None:
    return None if _get(data, key) is None else float_field(data, key)


def str_field(data: Mapping[str, object], key: str) -> str:
    value = _get(data, key)
    if not isinstance(value, str):
        raise ValueError(f"field '{key}' should be a string, not {value!r}")
    return value


def str_tuple_field(data: Mapping[str, object], key: str) -> tuple[str, ...]:
    value = _get(data, key)
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"field '{key}' should be a list of strings, not {value!r}")
    return tuple(value)
