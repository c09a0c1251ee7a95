"""The tagged form itself: what is a tag and what is not, so that a plain dict is never misread, and the
system checks on a project's SERIALIZER."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.test import override_settings

from django_workflows.surfaces.checks import check_serializer
from django_workflows.shared.serialization import encode, is_plain, read
from django_workflows.typed_values import TaggedSerializer


@pytest.mark.parametrize("stored", [
    {"$type": "decimal", "value": "1.5", "other": 1},   # more keys than the tag's
    {"$type": "person", "name": "Ada"},                 # a name no tag has
    {"$type": "decimal", "value": 15},                  # a value of another shape
    {"$type": 3, "value": "x"},                         # not a tag's name at all
    {"$type": "model", "model": "shop.order"},          # a tag's keys, some missing
])
def test_a_plain_dict_written_before_typed_values_reads_back_as_it_was(stored):
    assert read(json.dumps(stored)) == stored


@pytest.mark.parametrize("value", [
    {"$type": "decimal", "value": "1.5"},
    {"a": [{"$type": "dict", "value": {"$type": "x"}}]},
    {"$type": "set", "value": []},
])
def test_a_users_dict_that_looks_like_a_tag_is_escaped_and_comes_back_as_written(value):
    text, first_run = encode(value, 10_000)
    assert first_run == value and read(text) == value
    assert not is_plain(value)


def test_plain_json_is_written_as_before_without_tags():
    value = {"a": [1, 2.5, "x", None, True], "b": {"c": {}}}
    text, first_run = encode(value, 10_000)
    assert is_plain(value) and text == json.dumps(value, separators=(",", ":")) and first_run == value


def test_the_default_serializer_passes_its_own_check():
    assert check_serializer() == []


class Lossy(TaggedSerializer):
    def load_other(self, tag, tree):
        return float(tree["value"]) if tag == "decimal" else super().load_other(tag, tree)


def test_a_serializer_that_loses_a_type_is_refused():
    with override_settings(DJANGO_WORKFLOWS={"SERIALIZER": f"{__name__}.Lossy"}):
        messages = check_serializer()
    assert [m.id for m in messages] == ["django_workflows.E036"]
    assert "Decimal('12.30')" in messages[0].msg and "12.3 (float)" in messages[0].msg


def test_a_serializer_that_cannot_be_imported_is_refused():
    with override_settings(DJANGO_WORKFLOWS={"SERIALIZER": "no.such.Serializer"}):
        messages = check_serializer()
    assert [m.id for m in messages] == ["django_workflows.E035"]
    assert "no.such" in messages[0].msg

