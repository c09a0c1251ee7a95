"""The journal's tagged form: Python values that JSON has no type for, written as JSON a person can read.

A value JSON cannot say is written as an object with the reserved key ``"$type"``::

    Decimal("12.30")            {"$type": "decimal", "value": "12.30"}
    datetime(2024, 5, 1, 9, tzinfo=UTC)
                                {"$type": "datetime", "value": "2024-05-01T09:00:00+00:00"}
    (1, 2)                      {"$type": "tuple", "value": [1, 2]}
    Order 42 (a model instance) {"$type": "model", "model": "shop.order", "pk": 42}

Everything else in the value stays as it is: plain JSON is written as plain JSON, so a journal written
before typed values existed reads back unchanged. A dict of the value's own that uses the key ``"$type"``
is escaped (``{"$type": "dict", "value": {...}}``), as is a dict with keys other than strings
(``{"$type": "dict", "items": [[key, value], ...]}``): whatever the value holds, reading it back gives it
again, and a dict is read as a tag only when it has exactly the keys of one.

A class named in the journal (a dataclass, a Pydantic model, an enum, a model) is imported again when the
value is read, and must still be one of those kinds: the journal never makes the engine call anything else.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from importlib import import_module
from typing import Any
from uuid import UUID

from django.apps import apps
from django.db import models
from django.utils.dateparse import parse_duration
from django.utils.duration import duration_iso_string

from django_workflows.errors import StoredObjectMissing, StoredValueUnreadable

TYPE_KEY = "$type"

_canonical = json.JSONEncoder(ensure_ascii=True, allow_nan=False, sort_keys=True, separators=(",", ":"))


class CannotTag(TypeError):
    """The value holds something the tagged form has no type for; the message names it."""


def _class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _import_class(path: str, kind: str, accepts) -> type:
    module_name, _, qualname = path.partition(":")
    try:
        found: Any = import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise StoredValueUnreadable(f"The journal names the {kind} {path!r}, which this code does not define; keep it "
                          "importable (or an alias of it) while instances that stored it may replay") from None
    if not isinstance(found, type) or not accepts(found):
        raise StoredValueUnreadable(f"The journal names {path!r} as a {kind}, and it is not one; the journal "
                                    "never makes the engine construct anything else")
    return found


def _is_pydantic_model(value: Any) -> bool:
    # Pydantic is an extra: a value can only be one of its models if the project imported it.
    return hasattr(type(value), "__pydantic_fields__") and hasattr(value, "model_dump")


class TaggedSerializer:
    """The default ``SERIALIZER``: values to the tagged form (``dump``) and back (``load``).

    ``dump`` is only given values that are not plain JSON, ``load`` only trees whose JSON text holds
    ``"$type"``: plain JSON never pays for the tags. A project's own serializer may subclass this one
    and extend ``dump_other``/``load_other`` for its types, or replace it whole.
    """

    reserved_key = TYPE_KEY
    # Text that every tagged tree's JSON holds: journaled text without it is read as plain JSON.
    marker = json.dumps(TYPE_KEY)

    def dump(self, value: Any) -> Any:
        """``value`` as a tree of plain JSON types, the types JSON lacks tagged."""
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            return value
        if kind is float:
            return value
        if kind is list:
            return [self.dump(item) for item in value]
        if kind is dict:
            if all(type(key) is str for key in value):
                items = {key: self.dump(item) for key, item in value.items()}
                return {TYPE_KEY: "dict", "value": items} if TYPE_KEY in value else items
            return {TYPE_KEY: "dict", "items": [[self.dump(key), self.dump(item)] for key, item in value.items()]}
        return self.dump_other(value)

    def dump_other(self, value: Any) -> Any:
        if isinstance(value, enum.Enum):
            return {TYPE_KEY: "enum", "class": _class_path(type(value)), "value": self.dump(value.value)}
        if isinstance(value, datetime):
            return {TYPE_KEY: "datetime", "value": value.isoformat()}
        if isinstance(value, date):
            return {TYPE_KEY: "date", "value": value.isoformat()}
        if isinstance(value, time):
            return {TYPE_KEY: "time", "value": value.isoformat()}
        if isinstance(value, timedelta):
            return {TYPE_KEY: "timedelta", "value": duration_iso_string(value)}
        if isinstance(value, Decimal):
            return {TYPE_KEY: "decimal", "value": str(value)}
        if isinstance(value, UUID):
            return {TYPE_KEY: "uuid", "value": str(value)}
        if isinstance(value, bytes):
            return {TYPE_KEY: "bytes", "value": base64.b64encode(value).decode("ascii")}
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return {TYPE_KEY: "tuple", "value": [self.dump(item) for item in value]}
        if isinstance(value, (set, frozenset)):
            # Sorted by their JSON, so that equal sets are journaled (and digested) alike.
            items = sorted((self.dump(item) for item in value), key=_canonical.encode)
            return {TYPE_KEY: "frozenset" if isinstance(value, frozenset) else "set", "value": items}
        if isinstance(value, models.Model):
            if value.pk is None:
                raise CannotTag(f"an unsaved {type(value).__name__}; save it first, the journal keeps "
                                "a reference to its row")
            return {TYPE_KEY: "model", "model": value._meta.label_lower, "pk": self.dump(value.pk)}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {field.name: self.dump(getattr(value, field.name)) for field in dataclasses.fields(value)
                      if field.init}
            return {TYPE_KEY: "dataclass", "class": _class_path(type(value)), "value": fields}
        if _is_pydantic_model(value):
            return {TYPE_KEY: "pydantic", "class": _class_path(type(value)),
                    "value": value.model_dump(mode="json")}
        raise CannotTag(f"a {type(value).__module__}.{type(value).__qualname__}")

    def load(self, tree: Any) -> Any:
        """The value ``dump`` wrote as ``tree``."""
        kind = type(tree)
        if kind is list:
            return [self.load(item) for item in tree]
        if kind is not dict:
            return tree
        tag = tree.get(TYPE_KEY)
        if tag is None or not isinstance(tag, str):
            return {key: self.load(item) for key, item in tree.items()}
        return self.load_other(tag, tree)

    def load_other(self, tag: str, tree: dict[str, Any]) -> Any:
        keys = tree.keys()
        value = tree.get("value")
        if keys == {TYPE_KEY, "value"}:
            if tag == "dict" and isinstance(value, dict):
                return {key: self.load(item) for key, item in value.items()}
            reader = _SCALAR_READERS.get(tag)
            if reader is not None and isinstance(value, str):
                return reader(value)
            if tag in _COLLECTIONS and isinstance(value, list):
                return _COLLECTIONS[tag](self.load(item) for item in value)
        elif keys == {TYPE_KEY, "items"} and tag == "dict" and isinstance(tree["items"], list):
            return {self.load(key): self.load(item) for key, item in tree["items"]}
        elif keys == {TYPE_KEY, "class", "value"} and isinstance(tree["class"], str):
            return self._load_class(tag, tree["class"], value)
        elif keys == {TYPE_KEY, "model", "pk"} and tag == "model":
            return _load_row(tree["model"], self.load(tree["pk"]))
        # Not one of the tags' shapes: a plain dict written before typed values (they escape "$type").
        return {key: self.load(item) for key, item in tree.items()}

    def _load_class(self, tag: str, path: str, value: Any) -> Any:
        if tag == "enum":
            return _import_class(path, "enum", lambda cls: issubclass(cls, enum.Enum))(self.load(value))
        if tag == "dataclass":
            cls = _import_class(path, "dataclass", dataclasses.is_dataclass)
            return cls(**{key: self.load(item) for key, item in value.items()})
        if tag == "pydantic":
            cls = _import_class(path, "Pydantic model", lambda cls: hasattr(cls, "model_validate"))
            return cls.model_validate(value)  # type: ignore[attr-defined]
        return {TYPE_KEY: tag, "class": path, "value": self.load(value)}

    def sample_values(self) -> list[Any]:
        """Values the system check round-trips through ``dump``, JSON and ``load`` (W-level refusal if
        one does not come back equal and of the same type)."""
        from datetime import UTC
        return [Decimal("12.30"), datetime(2024, 5, 1, 9, 30, tzinfo=UTC), date(2024, 5, 1), time(9, 30),
                timedelta(days=1, seconds=5), UUID("12345678-1234-5678-1234-567812345678"), b"\x00\xff",
                {1, 2}, frozenset({"a"}), (1, "two"), {TYPE_KEY: "dict", "value": 1}, {1: "one"}]


def _load_row(label: Any, pk: Any) -> models.Model:
    try:
        model = apps.get_model(label)
    except (LookupError, ValueError, TypeError):
        raise StoredValueUnreadable(f"The journal names the model {label!r}, which is not installed; keep its "
                                    "app installed while instances that stored it may replay") from None
    try:
        # The base manager: a default manager that hides rows (soft deletion, tenancy) must not make a
        # stored reference unreadable.
        return model._base_manager.get(pk=pk)
    except model.DoesNotExist:
        raise StoredObjectMissing(
            f"{model._meta.label} with pk {pk!r} was stored in the journal and has since been deleted; "
            "catch StoredObjectMissing where the value is read, or keep the row while instances need it",
            model=model._meta.label_lower, pk=pk) from None


_SCALAR_READERS = {
    "datetime": datetime.fromisoformat, "date": date.fromisoformat, "time": time.fromisoformat,
    "timedelta": parse_duration, "decimal": Decimal, "uuid": UUID,
    "bytes": lambda text: base64.b64decode(text.encode("ascii"), validate=True),
}
_COLLECTIONS: dict[str, Any] = {"tuple": tuple, "set": set, "frozenset": frozenset}
