"""What a declared result type makes of a value (django_workflows.shared.declared_types), and what it refuses."""

from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Literal, TypeVar
from uuid import UUID

import pytest

from django_workflows.shared.declared_types import DeclaredTypeMismatch, convert, is_declarable, return_annotation


class Size(enum.Enum):
    SMALL = "s"


@dataclasses.dataclass
class Parcel:
    size: Size
    weight: Decimal | None
    sent: datetime


@pytest.mark.parametrize(("value", "declared", "expected"), [
    ("12.30", Decimal, Decimal("12.30")),
    (12, Decimal, Decimal(12)),
    (0.1, Decimal, Decimal("0.1")),
    ("2024-05-01T09:30:00+00:00", datetime, datetime(2024, 5, 1, 9, 30, tzinfo=UTC)),
    ("2024-05-01", date, date(2024, 5, 1)),
    ("09:30", time, time(9, 30)),
    ("P1DT00H00M05S", timedelta, timedelta(days=1, seconds=5)),
    (90, timedelta, timedelta(seconds=90)),
    ("12345678-1234-5678-1234-567812345678", UUID, UUID("12345678-1234-5678-1234-567812345678")),
    ("AP8=", bytes, b"\x00\xff"),
    ("s", Size, Size.SMALL),
    (3, float, 3.0),
    (["1", "2"], list[Decimal], [Decimal(1), Decimal(2)]),
    (["1", "2"], set[Decimal], {Decimal(1), Decimal(2)}),
    (["1", "2024-01-01"], tuple[int | Decimal, date], (Decimal(1), date(2024, 1, 1))),
    ({"a": "1"}, dict[str, Decimal], {"a": Decimal(1)}),
    (None, Decimal | None, None),
    ({"x": 1}, Any, {"x": 1}),
    ("anything", Literal["a"], "anything"),
])
def test_a_value_becomes_its_declared_type(value, declared, expected):
    converted = convert(value, declared)
    assert converted == expected and type(converted) is type(expected)


def test_a_dataclass_is_built_from_a_dict_its_fields_made_into_their_types():
    parcel = convert({"size": "s", "weight": "1.25", "sent": "2024-05-01T09:00:00+00:00"}, Parcel)
    assert parcel == Parcel(Size.SMALL, Decimal("1.25"), datetime(2024, 5, 1, 9, tzinfo=UTC))


@pytest.mark.parametrize(("value", "declared", "message"), [
    ("twelve", Decimal, "str 'twelve' is not a decimal number"),
    ("NaN", Decimal, "is not a finite decimal number"),
    (True, int, "bool True is not of type int"),
    (datetime(2024, 5, 1, tzinfo=UTC), date, "is not text a date can be read from"),
    ("yesterday", date, "cannot become a date: Invalid isoformat string"),
    ("m", Size, "cannot become a Size"),
    ({"size": "s", "colour": "red"}, Parcel, "Parcel has no field 'colour'"),
    ([1, 2], dict[str, int], "list [1, 2] is not a dict"),
    ((1, 2, 3), tuple[int, int], "has 3 items"),
    ("x", int | Decimal, "is not of type int; str 'x' is not a decimal number"),
])
def test_a_value_that_cannot_become_its_declared_type_says_what_it_was(value, declared, message):
    with pytest.raises(DeclaredTypeMismatch) as raised:
        convert(value, declared)
    assert message in str(raised.value)


T = TypeVar("T")


def test_only_types_can_be_declared_and_an_annotation_that_is_none_declares_nothing():
    assert is_declarable(Decimal) and is_declarable(list[Decimal]) and is_declarable(Decimal | None)
    assert not is_declarable("Decimal") and not is_declarable(T)

    def annotated() -> Decimal: ...
    def returns_none() -> None: ...
    def unresolvable() -> NotDefinedAnywhere: ...  # type: ignore[name-defined]  # noqa: F821

    assert return_annotation(annotated) is Decimal
    assert return_annotation(returns_none) is None
    assert return_annotation(unresolvable) is None
    assert return_annotation(lambda: 1) is None
