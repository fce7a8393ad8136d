"""Typed JSON records: frozen dataclasses that write and read themselves, and the JSON Schema of each.

The files audiodeploy writes and reads back (the sidecar beside a program, the bench record, the native runner's
report) are trees of frozen dataclasses deriving from `Record`. Their fields and type hints are the format:

- `Record.to_dict` writes the fields in their order (the order of keys is part of files already on disk);
- `Record.from_dict` reads a parsed JSON document back, refuses keys it does not know, and names the first
  malformed field by its path: ``field 'cases[0].runtimes.eager.latency.p90_s' is missing``;
- `json_schema` derives the JSON Schema (draft 2020-12) of a record, checked in beside this module (``schemas/``).

What a type hint cannot say (a CTC program needs its vocabulary, every case measures every runtime) is checked in
the record's ``__post_init__``, which runs for records built in code and read from files alike.

Plain dataclasses rather than pydantic or attrs: the records are small and few, and audiodeploy is installed on
the hosts that drive phones and boards, where a validation library would be one more dependency (and for pydantic
a compiled one) to resolve for a few hundred lines of reading and writing.

The hints understood: ``str``, ``int``, ``float`` (an integer is a number too, and is kept as written), ``bool``,
``None``, ``Literal``, unions (``X | None``; of records: the first alternative that reads), ``tuple[X, ...]``,
``tuple[X, Y]``, ``list[X]``, ``dict[str, X]``, ``Any``, nested records, and dataclasses with their own
``to_dict``/``from_dict`` (the program's `InputSpec`, `OutputSpec`, `CtcVocabulary`, `MelSpectrogram`, whose
readers say more than a type can), whose schema is derived from their fields all the same.

Field metadata: `json_key` (the key differs from the attribute), `OMITTED_WHEN_NONE` (the key is left out
rather than written as null), `NOT_IN_JSON` (an attribute of the object, not of the document: where it was read
from). A field with a default may be absent from a document (records written before it existed), unless it is a
constant (``schema``, a one-value ``Literal``); every other field is required.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Self, TypeVar, get_args, get_origin

DRAFT = "https://json-schema.org/draft/2020-12/schema"

OMITTED_WHEN_NONE: Mapping[str, object] = types.MappingProxyType({"omitted_when_none": True})
"""Field metadata: None is written by leaving the key out (the key was only ever written when it had a value)."""

NOT_IN_JSON: Mapping[str, object] = types.MappingProxyType({"json": False})
"""Field metadata: the attribute is not part of the document (neither written, read, nor in the schema)."""


def json_key(key: str) -> Mapping[str, object]:
    """Field metadata: the document's key for this attribute, when they differ."""
    return types.MappingProxyType({"key": key})


RecordT = TypeVar("RecordT", bound="Record")


class Record:
    """Base of the typed records: a frozen dataclass that writes (`to_dict`, `to_json`) and reads (`from_dict`,
    `from_json`) itself. Reading raises ValueError naming the malformed field."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def to_dict(self) -> dict[str, Any]:
        """The document: every field in order, as JSON types (lists for tuples)."""
        document: dict[str, Any] = {}
        for field in _json_fields(type(self)):
            value = getattr(self, field.name)
            if value is None and field.metadata.get("omitted_when_none"):
                continue
            document[_key(field)] = _write(value)
        return document

    @classmethod
    def from_dict(cls, data: object) -> Self:
        """The record `to_dict` wrote (as parsed from JSON); ValueError naming the first malformed field."""
        record: Self = _read_record(cls, data, "")
        return record

    def to_json(self) -> str:
        """The document as the files hold it: indented by two spaces, with a final newline."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """The record `to_json` wrote; ValueError for text that is not JSON or not this record."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"not JSON ({error.msg} at character {error.pos})") from None
        except (UnicodeDecodeError, RecursionError) as error:
            raise ValueError(f"not JSON ({error})") from None
        return cls.from_dict(data)


# --- reading and writing ---------------------------------------------------------------------------------------


class _WrongKind(ValueError):
    """A Literal field of a record has another value: in a union of records, that alternative is not the one."""


_UNIONS = (typing.Union, types.UnionType)
_SCALARS: dict[type, tuple[tuple[type, ...], str, str]] = {
    # hint: (the Python types that hold it, as an error names it, its JSON Schema type)
    bool: ((bool,), "a boolean", "boolean"),
    int: ((int,), "an integer", "integer"),
    float: ((int, float), "a number", "number"),
    str: ((str,), "a string", "string"),
}


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _json_fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if f.metadata.get("json", True))


def _key(field: dataclasses.Field[Any]) -> str:
    return str(field.metadata.get("key", field.name))


def _required(field: dataclasses.Field[Any], hint: Any) -> bool:
    """A field without a default must be in a document, and so must a constant (``schema``: what it is)."""
    if get_origin(hint) is Literal and len(get_args(hint)) == 1:
        return True
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _write(value: object) -> object:
    if isinstance(value, Record):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_write(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _write(item) for key, item in value.items()}
    return value


def _read_record(cls: type[RecordT], data: object, path: str) -> RecordT:
    if not isinstance(data, Mapping):
        raise ValueError(f"field '{path}' should be an object, not {_shown(data)}" if path else "not an object")
    hints = _hints(cls)
    fields = _json_fields(cls)
    values: dict[str, object] = {}
    for field in fields:
        key, hint = _key(field), hints[field.name]
        if key not in data:
            if _required(field, hint):
                raise ValueError(f"field '{_at(path, key)}' is missing")
            continue
        try:
            values[field.name] = _read(hint, data[key], _at(path, key))
        except _WrongKind as error:
            if get_origin(hint) is Literal:
                raise  # this record's own kind: the caller may try another record
            raise ValueError(str(error)) from None
    known = {_key(field) for field in fields}
    unknown = [key for key in data if key not in known]
    if unknown:
        raise ValueError(f"field '{_at(path, str(unknown[0]))}' is unknown")
    try:
        return cls(**values)
    except ValueError as error:  # a check of __post_init__
        raise ValueError(f"{path}: {error}" if path else str(error)) from None


def _read(hint: Any, value: object, path: str) -> object:
    origin = get_origin(hint)
    if hint is Any:
        return value
    if origin is Literal:
        choices = get_args(hint)
        if any(value == choice and type(value) is type(choice) for choice in choices):
            return value
        raise _WrongKind(f"field '{path}' should be {_choices(choices)}, not {_shown(value)}")
    if origin in _UNIONS:
        return _read_union(hint, value, path)
    if hint is type(None):
        if value is None:
            return None
        raise ValueError(f"field '{path}' should be null, not {_shown(value)}")
    if hint in _SCALARS:
        kinds, name, _ = _SCALARS[hint]
        if isinstance(value, kinds) and (hint is bool or not isinstance(value, bool)):
            return value
        raise ValueError(f"field '{path}' should be {name}, not {_shown(value)}")
    if origin in (tuple, list):
        return _read_sequence(hint, value, path)
    if origin is dict:
        if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
            raise ValueError(f"field '{path}' should be an object, not {_shown(value)}")
        item_hint = get_args(hint)[1]
        return {key: _read(item_hint, item, f"{path}.{key}") for key, item in value.items()}
    if isinstance(hint, type) and issubclass(hint, Record):
        return _read_record(hint, value, path)
    if dataclasses.is_dataclass(hint) and hasattr(hint, "from_dict"):
        if not isinstance(value, Mapping):
            raise ValueError(f"field '{path}' should be an object, not {_shown(value)}")
        try:
            return hint.from_dict(value)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}: {error}") from None
    raise TypeError(f"a record cannot hold {hint!r} (field '{path}')")


def _read_sequence(hint: Any, value: object, path: str) -> object:
    args = get_args(hint)
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"field '{path}' should be a list, not {_shown(value)}")
    if get_origin(hint) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            raise ValueError(f"field '{path}' should be a list of {len(args)} items, not {_shown(value)}")
        return tuple(_read(arg, item, f"{path}[{i}]") for i, (arg, item) in enumerate(zip(args, value)))
    items = [_read(args[0], item, f"{path}[{i}]") for i, item in enumerate(value)]
    return tuple(items) if get_origin(hint) is tuple else items


def _read_union(hint: Any, value: object, path: str) -> object:
    options = get_args(hint)
    if value is None and type(None) in options:
        return None
    options = tuple(option for option in options if option is not type(None))
    if len(options) == 1:
        return _read(options[0], value, path)
    errors = []
    for option in options:
        try:
            return _read(option, value, path)
        except _WrongKind:
            continue  # another kind of record: not this alternative
        except ValueError as error:
            errors.append(str(error))
    if len(errors) == 1:
        raise ValueError(errors[0])
    names = " or ".join(getattr(option, "__name__", str(option)) for option in options)
    raise ValueError(f"field '{path}' is not a {names}" + (f" ({'; '.join(errors)})" if errors else ""))


def _choices(choices: tuple[object, ...]) -> str:
    shown = [repr(choice) for choice in choices]
    if len(shown) == 1:
        return shown[0]
    if len(shown) == 2:
        return " or ".join(shown)
    return "one of " + ", ".join(shown)


# --- JSON Schema -----------------------------------------------------------------------------------------------


def json_schema(cls: type, schema_id: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the documents `cls` writes and reads, with the id `schema_id`.

    Each record (and each dataclass in it) is an object of exactly its fields, those without a default required,
    described by the first paragraph of its docstring; nested ones are ``$defs``, referred to by class name.
    """
    definitions: dict[str, dict[str, Any]] = {}
    schema: dict[str, Any] = {"$schema": DRAFT, "$id": schema_id, **_object_schema(cls, definitions)}
    if definitions:
        schema["$defs"] = dict(sorted(definitions.items()))
    return schema


def schema_text(cls: type, schema_id: str) -> str:
    """`json_schema` as the checked-in file holds it."""
    return json.dumps(json_schema(cls, schema_id), indent=2, ensure_ascii=False) + "\n"


def _object_schema(cls: type, definitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    hints = _hints(cls)
    fields = _json_fields(cls)
    schema: dict[str, Any] = {"title": cls.__name__}
    description = _summary(cls)
    if description:
        schema["description"] = description
    schema["type"] = "object"
    schema["properties"] = {_key(field): _schema(hints[field.name], definitions) for field in fields}
    schema["required"] = [_key(field) for field in fields if _required(field, hints[field.name])]
    schema["additionalProperties"] = False
    return schema


def _schema(hint: Any, definitions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    origin = get_origin(hint)
    if hint is Any:
        return {}
    if origin is Literal:
        choices = list(get_args(hint))
        return {"const": choices[0]} if len(choices) == 1 else {"enum": choices}
    if origin in _UNIONS:
        if all(get_origin(arg) is Literal or arg is type(None) for arg in get_args(hint)):
            return {"enum": [value for arg in get_args(hint) for value in (get_args(arg) or (None,))]}
        options = [_schema(arg, definitions) for arg in get_args(hint)]
        if all(set(option) == {"type"} for option in options):
            return {"type": [option["type"] for option in options]}
        return {"anyOf": options}
    if hint is type(None):
        return {"type": "null"}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint][2]}
    args = get_args(hint)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        items = [_schema(arg, definitions) for arg in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "items": False}
    if origin in (tuple, list):
        return {"type": "array", "items": _schema(args[0], definitions)}
    if origin is dict:
        values = _schema(args[1], definitions)
        return {"type": "object", "additionalProperties": values} if values else {"type": "object"}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        name = hint.__name__
        if name not in definitions:
            definitions[name] = {}  # taken before its fields are walked
            definitions[name] = _object_schema(hint, definitions)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for {hint!r}")


def _summary(cls: type) -> str:
    """The first paragraph of the class's own docstring, on one line; none for a dataclass's generated one."""
    doc = cls.__dict__.get("__doc__")
    if not doc or doc.startswith(f"{cls.__name__}("):
        return ""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
