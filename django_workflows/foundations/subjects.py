"""An instance's subject: the row it is about (an order, an expense), as ``create(subject=order)`` binds it.

A generic relation (content type and primary key as text), so any model with any primary key may be a
subject. Written as ``"app_label.model:pk"`` where it must be text (the API's ``?subject=`` and its
answers, the CLI's ``--subject``): ``"shop.order:42"``, the model's label in lower case as Django's
content types spell it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db import models

from django_workflows.errors import InvalidSubject

FORM = "'app_label.model:pk', like 'shop.order:42'"


def subject_of(obj: Any) -> tuple[ContentType, str]:
    """The content type and primary key (as text) of ``obj``, a saved model instance; anything else is
    ``InvalidSubject``."""
    if not isinstance(obj, models.Model):
        raise InvalidSubject(f"subject must be a saved model instance (an order, an expense), got "
                             f"{type(obj).__name__}; pass the row itself, not its id.")
    if obj.pk is None or obj._state.adding:
        raise InvalidSubject(f"subject {obj._meta.label} has not been saved: save() it before binding an "
                             "instance to it, so that the instance can find it again.")
    return ContentType.objects.get_for_model(obj), str(obj.pk)


def parse_reference(text: Any) -> tuple[ContentType, str]:
    """``"shop.order:42"`` as the content type of ``shop.Order`` and ``"42"``; a form it cannot read or a
    model not installed is ``InvalidSubject``. The row itself need not exist: a filter on a deleted
    order's instances still finds them."""
    label, colon, pk = text.partition(":") if isinstance(text, str) else ("", "", "")
    app_label, dot, model = label.partition(".")
    if not (colon and dot and app_label and model and pk):
        raise InvalidSubject(f"subject {text!r}: write {FORM}.")
    try:
        content_type = ContentType.objects.get_by_natural_key(app_label, model.lower())
    except ContentType.DoesNotExist:
        raise InvalidSubject(f"subject {text!r}: no installed model is called {label!r}; write {FORM}.") from None
    return content_type, pk


def load(text: Any) -> models.Model:
    """The row ``"shop.order:42"`` names, read from its table: what binds an instance created through the API
    or the CLI. A reference it cannot read, a model not installed, or a row that does not exist (or a key
    the model's primary key cannot hold) is ``InvalidSubject``: an instance is bound to a row that exists
    when it is created, as ``create(subject=order)`` binds one."""
    content_type, pk = parse_reference(text)
    model = content_type.model_class()
    if model is None:
        raise InvalidSubject(f"subject {text!r}: the model {content_type.app_label}.{content_type.model} is no "
                             f"longer installed; write {FORM}.")
    try:
        return model._default_manager.get(pk=pk)
    except (ObjectDoesNotExist, ValueError, TypeError, ValidationError):
        raise InvalidSubject(f"subject {text!r}: there is no {model._meta.label} with the primary key {pk!r}; "
                             "an instance is bound to a row that exists.") from None


def reference(content_type_id: int | None, pk: str | None) -> str | None:
    """The ``"app_label.model:pk"`` of a stored subject, or None for an instance bound to none."""
    if content_type_id is None or pk is None:
        return None
    content_type = ContentType.objects.get_for_id(content_type_id)
    return f"{content_type.app_label}.{content_type.model}:{pk}"


def find(target: Any) -> tuple[ContentType, str]:
    """A subject given as a model instance or as its reference text."""
    if isinstance(target, str):
        return parse_reference(target)
    if not isinstance(target, models.Model):
        raise InvalidSubject(f"A subject is looked up by a saved model instance or its reference, {FORM}; got "
                             f"{type(target).__name__}.")
    return subject_of(target)
