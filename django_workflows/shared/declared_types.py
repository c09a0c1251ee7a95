"""A value made into a declared type: a step's ``result_type=`` (or its function's return annotation), when
the value alone does not say what it is.

A step that returns a dict the journal keeps as a dict; declared ``result_type=Quote`` (a dataclass), the
dict becomes a ``Quote`` whenever ``run()`` gets it: on the first run, just after the step, and on every
replay, from the journal. What each declared type accepts, besides a value already of that type:

    a Pydantic model      whatever its ``model_validate`` accepts (a dict, a model instance)
    a dataclass           a dict of its fields (each made into its field's annotated type)
    Decimal               a str, an int, or a float (by its shortest text: 0.1 is Decimal("0.1"))
    datetime, date, time  ISO 8601 text
    timedelta             ISO 8601 text (what the journal writes), or a number of seconds
    UUID                  its text
    bytes                 base64 text
    an enum               one of its values
    a Django model        a primary key (the row is read through the base manager)
    float                 an int
    list[X], tuple[X, ...], set[X], frozenset[X], dict[K, V]
                          a list, tuple or set (a dict), each item made into X (each key into K, value into V)
    X | None              None, or what X accepts
    Any, object           anything, unchanged

Any other class takes only its own instances. A value that cannot become the declared type is refused
with ``DeclaredTypeMismatch``, whose message says what it was and what was declared; the caller names the
step. Annotations that are not types (a ``TypeVar``, ``Literal[...]``) leave the value unchanged.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.core.exceptions import ObjectDoesNotExist
from django.db import models
from django.utils.dateparse import parse_duration

from django_workflows.errors import StoredObjectMissing


class DeclaredTypeMismatch(TypeError):
    """The value cannot become the declared type; the message says why, for the caller to put in context."""


def type_name(declared: Any) -> str:
    return declared.__qualname__ if isinstance(declared, type) else repr(declared)


def is_declarable(declared: Any) -> bool:
    """Whether ``declared`` is a type this module converts to (a class, or a generic of one)."""
    if isinstance(declared, type) or declared in (Any, None):
        return True
    origin = typing.get_origin(declared)
    if origin is typing.Annotated:
        return is_declarable(typing.get_args(declared)[0])
    if origin in (typing.Union, types.UnionType):
        return all(is_declarable(arg) for arg in typing.get_args(declared))
    return isinstance(origin, type)


def return_annotation(fn: Callable[..., Any]) -> Any:
    """``fn``'s return annotation, resolved; None when it has none, or one that cannot be resolved (a
    class defined inside ``run()`` named in a string annotation): then the value is taken as it is."""
    target = getattr(fn, "__func__", fn)
    if not callable(target) or "return" not in getattr(target, "__annotations__", {}):
        return None
    try:
        declared = typing.get_type_hints(target).get("return")
    except Exception:  # a forward reference this module cannot resolve: not a declaration it can keep
        return None
    if declared is type(None) or not is_declarable(declared):
        # "-> None" says nothing about a journaled value worth enforcing; other annotations are not types.
        return None
    return declared


def convert(value: Any, declared: Any) -> Any:
    """``value`` as ``declared``; raises ``DeclaredTypeMismatch``."""
    if declared is None or declared is Any or declared is object:
        return value
    origin = typing.get_origin(declared)
    if origin is not None:
        return _convert_generic(value, declared, origin)
    if not isinstance(declared, type):
        return value
    if isinstance(value, declared) and not _lookalike(value, declared):
        return value
    try:
        if hasattr(declared, "model_validate") and hasattr(declared, "__pydantic_fields__"):
            return declared.model_validate(value)
        if dataclasses.is_dataclass(declared):
            return _dataclass(value, declared)
        for kind, reader in _READERS:
            if issubclass(declared, kind):
                return reader(value, declared)
        if issubclass(declared, models.Model):
            return _row(value, declared)
    except DeclaredTypeMismatch:
        raise
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
        raise DeclaredTypeMismatch(f"{_shown(value)} cannot become a {type_name(declared)}: {exc}") from None
    raise DeclaredTypeMismatch(f"{_shown(value)} is not of type {type_name(declared)}")


def _lookalike(value: Any, declared: type) -> bool:
    # A bool is an int and a datetime a date to isinstance(), and neither is what int or date declares.
    return (declared is int and isinstance(value, bool)) or (declared is date and isinstance(value, datetime))


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def _convert_generic(value: Any, declared: Any, origin: Any) -> Any:
    args = typing.get_args(declared)
    if origin is typing.Annotated:
        return convert(value, args[0])
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if isinstance(arg, type) and isinstance(value, arg):
                return value
        problems = []
        for arg in args:
            try:
                return convert(value, arg)
            except DeclaredTypeMismatch as exc:
                problems.append(str(exc))
        raise DeclaredTypeMismatch("; ".join(problems))
    if not isinstance(origin, type):
        return value  # Literal, a TypeVar's generic: not a type to make a value into
    if origin is dict:
        if not isinstance(value, dict):
            raise DeclaredTypeMismatch(f"{_shown(value)} is not a dict")
        key_type, item_type = args or (Any, Any)
        return {convert(key, key_type): convert(item, item_type) for key, item in value.items()}
    if origin in (list, tuple, set, frozenset):
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise DeclaredTypeMismatch(f"{_shown(value)} is not a list, tuple or set for {declared!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise DeclaredTypeMismatch(f"{_shown(value)} has {len(value)} items, {declared!r} "
                                           f"{len(args)}")
            return tuple(convert(item, arg) for item, arg in zip(value, args))
        item_type = args[0] if args else Any
        return origin(convert(item, item_type) for item in value)
    if isinstance(value, origin):
        return value
    return convert(value, origin)


def _dataclass(value: Any, declared: type) -> Any:
    if not isinstance(value, dict):
        raise DeclaredTypeMismatch(f"{_shown(value)} is not a dict of the fields of {type_name(declared)}")
    try:
        hints = typing.get_type_hints(declared)
    except Exception:  # a field annotated with a name this module cannot resolve: taken as it is
        hints = {}
    fields = {field.name for field in dataclasses.fields(declared) if field.init}
    unknown = sorted(set(value) - fields)
    if unknown:
        raise DeclaredTypeMismatch(f"{type_name(declared)} has no field {unknown[0]!r} (its fields: "
                                   f"{', '.join(sorted(fields))})")
    return declared(**{name: convert(item, hints.get(name)) for name, item in value.items()})


def _decimal(value: Any, declared: type) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DeclaredTypeMismatch(f"{_shown(value)} is not a Decimal (give its digits as text)")
    try:
        converted = declared(str(value) if isinstance(value, float) else value)
    except InvalidOperation:
        raise DeclaredTypeMismatch(f"{_shown(value)} is not a decimal number") from None
    if not converted.is_finite():
        raise DeclaredTypeMismatch(f"{_shown(value)} is not a finite decimal number")
    return converted


def _from_text(parse: Callable[[str], Any]) -> Callable[[Any, type], Any]:
    def read(value: Any, declared: type) -> Any:
        if not isinstance(value, str):
            raise DeclaredTypeMismatch(
                f"{_shown(value)} is not text a {type_name(declared)} can be read from")
        return parse(value)
    return read


def _timedelta(value: Any, declared: type) -> timedelta:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=value)
    parsed = _from_text(parse_duration)(value, declared)
    if parsed is None:
        raise DeclaredTypeMismatch(f"{_shown(value)} is not an ISO 8601 duration")
    return parsed


def _bytes(value: Any, declared: type) -> bytes:
    try:
        return base64.b64decode(_from_text(str.encode)(value, declared), validate=True)
    except binascii.Error:
        raise DeclaredTypeMismatch(f"{_shown(value)} is not base64 text") from None


def _float(value: Any, declared: type) -> float:
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise DeclaredTypeMismatch(f"{_shown(value)} is not a float")


def _row(value: Any, declared: type[models.Model]) -> models.Model:
    if isinstance(value, (dict, list)) or value is None:
        raise DeclaredTypeMismatch(f"{_shown(value)} is not a primary key of {declared._meta.label}")
    try:
        return declared._base_manager.get(pk=value)
    except ObjectDoesNotExist:
        raise StoredObjectMissing(
            f"{declared._meta.label} with pk {value!r} does not exist (it was deleted, or never was)",
            model=declared._meta.label_lower, pk=value) from None


# In this order: a datetime is a date, so datetime comes first.
_READERS: tuple[tuple[type, Callable[[Any, Any], Any]], ...] = (
    (Decimal, _decimal),
    (datetime, _from_text(datetime.fromisoformat)),
    (date, _from_text(date.fromisoformat)),
    (time, _from_text(time.fromisoformat)),
    (timedelta, _timedelta),
    (UUID, _from_text(UUID)),
    (bytes, _bytes),
    (enum.Enum, lambda value, declared: declared(value)),
    (float, _float),
)
