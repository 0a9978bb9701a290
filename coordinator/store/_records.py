"""Rows to attrs records and back, derived once from each record's fields, for every backend.

A record's fields name its columns, in order. How a column is read follows from the field's type: a
plain value (``str``, ``int``, ``float``, a ``Literal``, any of them ``| None``) is taken as the
driver returns it, a ``bool`` from its stored 0/1, and anything else (a stop reason, a list of
questions, ``Any``) is JSON text turned into the field's type by the one converter
(``coordinator/wire.py``). A field made of several columns (a ``ParentLink`` from
``parent_session_id, parent_call_id``) is declared as ``nested``. Nothing is written by hand per
record, so a field added to a record is a column read back without another line of code.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Generic, Literal, TypeVar

import attrs

from coordinator import wire

T = TypeVar("T")

_PLAIN = (str, int, float)


def load_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def dump_json(value: Any) -> str | None:
    """A value's wire form as compact JSON text (None stays NULL)."""
    return None if value is None else json.dumps(wire.unstructure(value), separators=(",", ":"))


def _decoder(kind: Any) -> Callable[[Any], Any]:
    """How a column holding a field of type ``kind`` is read."""
    if kind is bool:
        return bool
    if kind is Any:
        return load_json
    if _is_plain(kind):
        return _same
    return lambda text: None if text is None else wire.structure(json.loads(text), kind)


def _same(value: Any) -> Any:
    return value


def _is_plain(kind: Any) -> bool:
    """A type the database stores as it is: text, numbers, literals, each maybe None."""
    if kind is type(None) or (isinstance(kind, type) and issubclass(kind, _PLAIN) and kind is not bool):
        return True  # a stored status enum too (``coordinator/statuses.py``): a str or an int
    origin = typing.get_origin(kind)
    if origin is Literal:
        return all(isinstance(arg, _PLAIN) for arg in typing.get_args(kind))
    if origin in (typing.Union, types.UnionType):
        return all(_is_plain(arg) for arg in typing.get_args(kind))
    return False


def encode(value: Any) -> Any:
    """A field's value as a column: plain values as they are, booleans as 0/1, the rest as JSON."""
    if value is None or (isinstance(value, _PLAIN) and not isinstance(value, bool)):
        return value
    if isinstance(value, bool):
        return int(value)
    return dump_json(value)


@attrs.frozen
class RowMapper(Generic[T]):
    """The columns of record class ``cls`` and how a row of them becomes one."""

    cls: type[T]
    columns: tuple[str, ...]
    _readers: tuple[tuple[str, int, Callable[[tuple[Any, ...]], Any]], ...]

    @property
    def select(self) -> str:
        """The column list for a ``SELECT``, in the record's field order."""
        return ", ".join(self.columns)

    def load(self, row: tuple[Any, ...]) -> T:
        """The record a row of ``select`` holds."""
        values = {}
        at = 0
        for name, width, read in self._readers:
            values[name] = read(row[at : at + width])
            at += width
        return self.cls(**values)

    def load_or_none(self, row: tuple[Any, ...] | None) -> T | None:
        return None if row is None else self.load(row)


def mapper(cls: type[T], *, nested: Mapping[str, tuple[str, ...]] | None = None) -> RowMapper[T]:
    """Derive the row mapping of attrs class ``cls``: one column per field, named as the field,
    except ``nested`` fields, each built from the columns named (None when the first is NULL)."""
    attrs.resolve_types(cls)  # type: ignore[type-var]
    nested = nested or {}
    columns: list[str] = []
    readers: list[tuple[str, int, Callable[[tuple[Any, ...]], Any]]] = []
    for field in attrs.fields(cls):  # type: ignore[arg-type]
        if field.name in nested:
            names = nested[field.name]
            columns.extend(names)
            readers.append((field.name, len(names), _nested_reader(field.type, names)))
        else:
            columns.append(field.name)
            readers.append((field.name, 1, _single_reader(_decoder(field.type))))
    return RowMapper(cls, tuple(columns), tuple(readers))


def _single_reader(decode: Callable[[Any], Any]) -> Callable[[tuple[Any, ...]], Any]:
    return lambda cells: decode(cells[0])


def _nested_reader(kind: Any, names: tuple[str, ...]) -> Callable[[tuple[Any, ...]], Any]:
    """A record of several columns: the nested class's fields in order, None when the first is NULL."""
    inner = (
        next(arg for arg in typing.get_args(kind) if arg is not type(None)) if typing.get_args(kind) else kind
    )
    fields = [field.name for field in attrs.fields(inner)]
    if len(fields) != len(names):
        raise TypeError(f"{inner.__name__} has {len(fields)} fields, but {len(names)} columns name it")

    def read(cells: tuple[Any, ...]) -> Any:
        return None if cells[0] is None else inner(**dict(zip(fields, cells, strict=True)))

    return read
