"""Large values kept in file storage, the journal holding a reference to each.

A step result, an output or an event payload whose JSON is over ``LARGE_VALUE_THRESHOLD`` bytes is
written through Django's storage API (the ``LARGE_VALUE_STORAGE`` alias of ``STORAGES``) and the
journal keeps, in its place, a reference with the file's name, size and SHA-256:

    {"$stored": {"storage": "default", "name": "django_workflows/17/<sha256>.json",
                 "size": 300123, "sha256": "<sha256>"}}

A row of the journal stays small (a replay reads every row of it), and a database column never holds
megabytes. This module works on JSON text only, after ``serialization`` has encoded a value and before
it decodes one, so it composes with however values are encoded.

Only the top level of a value is ever a reference, and the key ``$stored`` there is reserved: a value
of the user's that is an object with that key is journaled wrapped, ``{"$stored": null, "value":
{...}}``, and unwrapped on reading, so no value can be taken for a reference.

Files are named by the instance's primary key, so that retention deletes an instance's files with it
(``delete_files``), and by their hash, so that the same value written twice (a retried journal write)
is one file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

from django_workflows.foundations.conf import workflow_settings
from django_workflows.errors import StoredValueError

MARKER = "$stored"
FOLDER = "django_workflows"
logger = logging.getLogger("django_workflows.large_values")


@dataclass(frozen=True)
class StoredValue:
    """Where a large value is, and what it must be when read back."""

    storage: str
    name: str
    size: int
    sha256: str

    def as_json(self) -> dict[str, Any]:
        return {MARKER: {"storage": self.storage, "name": self.name, "size": self.size, "sha256": self.sha256}}


def reference_of(value: Any) -> StoredValue | None:
    """The reference ``value`` is (as the journal holds it, decoded from JSON), or None."""
    if type(value) is not dict or not isinstance(value.get(MARKER), dict):
        return None
    fields = value[MARKER]
    try:
        return StoredValue(str(fields["storage"]), str(fields["name"]), int(fields["size"]), str(fields["sha256"]))
    except (KeyError, TypeError, ValueError):
        return None


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def offload(text: str, instance_pk: int) -> str:
    """The JSON text to journal for a value encoded as ``text``: ``text`` itself, or a reference to the
    file it was written to when it is over ``LARGE_VALUE_THRESHOLD`` bytes (an object of the user's with
    the reserved key wrapped, see above)."""
    # A UTF-8 character is at most 4 bytes: most values are told apart by their length alone.
    threshold = workflow_settings.LARGE_VALUE_THRESHOLD
    if len(text) * 4 > threshold and _utf8_size(text) > threshold:
        return json.dumps(store(text, instance_pk).as_json(), separators=(",", ":"))
    if text.startswith("{") and f'"{MARKER}"' in text:
        value = json.loads(text)
        if MARKER in value:
            return json.dumps({MARKER: None, "value": value}, ensure_ascii=False, separators=(",", ":"))
    return text


def store(text: str, instance_pk: int) -> StoredValue:
    """Write ``text`` to the configured storage under the instance's folder; return its reference."""
    content = text.encode("utf-8")
    digest = hashlib.sha256(content).hexdigest()
    alias = workflow_settings.LARGE_VALUE_STORAGE
    storage = storages[alias]
    name = f"{FOLDER}/{instance_pk}/{digest}.json"
    # Named by its hash: a file there already holds these bytes (read back, the hash is checked).
    if not storage.exists(name):
        saved = storage.save(name, ContentFile(content))
        if saved != name:
            # Written meanwhile by another writer of the same value: ours is a copy, dropped.
            storage.delete(saved)
    return StoredValue(alias, name, len(content), digest)


def load(value: Any, where: Callable[[], str]) -> Any:
    """``value`` as the journal holds it, decoded from JSON, made the value it stands for: a reference
    read back from storage (its size and hash checked), a wrapped object unwrapped, anything else as
    it is. ``where`` names the instance and step for an error: "instance refund/r-1, step 'fetch-1'"."""
    if type(value) is not dict or MARKER not in value:
        return value
    if value[MARKER] is None and "value" in value:
        return value["value"]
    reference = reference_of(value)
    if reference is None:
        return value  # journaled before the key was reserved: the user's own object
    return json.loads(read_text(reference, where))


SHA256 = re.compile(r"^[0-9a-f]{64}$")


def of_instance(instance_pk: int, sha256: str) -> StoredValue | None:
    """The stored value of an instance with this hash, found in the instance's own folder (so that no
    address reads a file of another instance), or None if it has none."""
    if not SHA256.match(sha256):
        return None
    reference = StoredValue(workflow_settings.LARGE_VALUE_STORAGE, f"{FOLDER}/{instance_pk}/{sha256}.json", 0,
                            sha256)
    return reference if storages[reference.storage].exists(reference.name) else None


def read_text(reference: StoredValue, where: Callable[[], str], check_size: bool = True) -> str:
    """The JSON text of a stored value, checked against its reference (its hash, and its size unless
    ``check_size`` is false: a reference rebuilt from the hash alone)."""
    try:
        storage: Storage = storages[reference.storage]
        with storage.open(reference.name, "rb") as file:
            content = file.read()
    except FileNotFoundError:
        raise StoredValueError(
            f"The value of {where()} is stored as {reference.name!r} in storage {reference.storage!r}, which has "
            "no such file: it was deleted or moved. Restore the file, or restart the instance.",
            name=reference.name, storage=reference.storage,
        ) from None
    except Exception as exc:
        raise StoredValueError(
            f"The value of {where()} could not be read from storage {reference.storage!r} "
            f"({reference.name!r}): {type(exc).__name__}: {exc}",
            name=reference.name, storage=reference.storage,
        ) from exc
    digest = hashlib.sha256(content).hexdigest()
    if digest != reference.sha256 or (check_size and len(content) != reference.size):
        raise StoredValueError(
            f"The value of {where()} stored as {reference.name!r} in storage {reference.storage!r} has changed: "
            f"it is {len(content)} bytes with SHA-256 {digest}, not the {reference.size} bytes with SHA-256 "
            f"{reference.sha256} that were written. Restore the file, or restart the instance.",
            name=reference.name, storage=reference.storage,
        )
    return content.decode("utf-8")


def instances_with_files() -> list[int]:
    """The instances that have files in the storage: one listing of its folder."""
    storage = storages[workflow_settings.LARGE_VALUE_STORAGE]
    # Listed, not asked whether it exists: an object store (S3) has no folders to exist.
    try:
        folders = storage.listdir(FOLDER)[0]
    except FileNotFoundError:
        return []
    except (OSError, NotImplementedError) as exc:
        logger.warning("Could not list the stored values in %r: %s", FOLDER, exc)
        return []
    return [int(name) for name in folders if name.isascii() and name.isdigit()]


def delete_files(instance_pks: Iterable[int], alias: str | None = None) -> None:
    """Delete the files of these instances (once their rows are deleted). Files of a storage alias no
    longer configured, or that cannot be listed, are logged and left: retention carries on."""
    storage = storages[alias or workflow_settings.LARGE_VALUE_STORAGE]
    for pk in instance_pks:
        folder = f"{FOLDER}/{pk}"
        try:
            _, files = storage.listdir(folder)
            for name in files:
                storage.delete(f"{folder}/{name}")
            _remove_empty_folder(storage, folder)
        except FileNotFoundError:
            continue
        except (OSError, NotImplementedError) as exc:
            logger.warning("Could not delete the stored values of instance %s: %s", pk, exc)


def _remove_empty_folder(storage: Storage, folder: str) -> None:
    # FileSystemStorage leaves the folder behind; other storages have no folders to remove.
    path = getattr(storage, "path", None)
    if path is None:
        return
    try:
        os.rmdir(path(folder))
    except (OSError, NotImplementedError):
        pass
