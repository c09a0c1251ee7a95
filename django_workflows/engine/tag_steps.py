"""What ``step.set_tags`` does on the replay: tag the instance from ``run()``, once.

    step.set_tags(customer=order.customer_ref, stage="shipping")

Tags are what an instance is searched by (``django_workflows.foundations.tag_rules``). A replay must set the same ones as
the run that first reached the call, or a filter would find the instance by whichever code replayed it
last: so each call is journaled, a marker row of kind ``tags`` keyed ``set_tags(<n>)`` (the n-th call of
this replay; a step's key always ends in ``-<count>``, so no step name can take it). A call whose marker
is in the journal sets nothing: the journal's tags were set when the marker was written, in the same
transaction, and they stay (the values run() passes now are not compared: tags derived from data that
changed since are not an error). A call on new ground writes its tags and its marker together.

A marker is not a step, as ``step.patched``'s is not: it takes no position among the steps and does not
count toward ``step_limit``. A value of None removes that tag. Tags set are kept through ``restart()``;
a replay after it sets them again where it reaches the call.
"""

from __future__ import annotations

from typing import Any

from django_workflows.engine.markers import CountedMarkers
from django_workflows.models import StepKind
from django_workflows.store import tags as instance_tags
from django_workflows.foundations.tag_rules import validate_tags


class TagSteps(CountedMarkers):
    """The replay's side of ``step.set_tags``, given the host and the replay's marker writer."""

    name = "set_tags"
    __slots__ = ()

    def set_tags(self, tags: Any) -> None:
        checked = validate_tags(tags, "step.set_tags()", removable=True)
        key = self.next_key()
        if key is not None and checked:
            # The tags and their marker, in one transaction: a replay fenced out (its marker refused) sets
            # no tags.
            self.markers.mark(key, "set_tags", StepKind.TAGS, {"tags": checked},
                              also=lambda instance_pk: instance_tags.write(instance_pk, checked))
