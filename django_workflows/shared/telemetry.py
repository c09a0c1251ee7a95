"""OpenTelemetry: a span for each replay and each step attempt, and metrics fed by the engine's signals.

On when ``opentelemetry-api`` is installed (``pip install 'django-durable-workflows[otel]'``) and the
``OPENTELEMETRY`` setting is not False; the app's ``ready()`` calls ``install()``. It uses the global
tracer and meter providers (the OpenTelemetry SDK, configured by your project, decides where spans and
metrics go; with no SDK they go nowhere, at the API's no-op cost). Without the package, this module
imports nothing of it, ``ENABLED`` stays False and the engine makes no call here.

Spans (the tracer ``django_workflows``):

- ``workflow.replay``: one replay, from the lease taken to the lease given back; the current span while
  ``run()`` runs. Attributes ``workflow.name``, ``workflow.instance.id``, ``workflow.instance.pk``,
  ``workflow.replay.epoch`` and, at its end, ``workflow.replay.outcome`` (as the ``replay_finished``
  signal says it); an instance that errored, or a statement of the engine's that failed, is recorded
  on it as an exception, with the status ERROR.
- ``workflow.step``: one attempt of a ``step.do``, a child of its replay's span (also when ``step.all``
  runs it in another thread; made only when the replay's span records, i.e. an SDK is configured
  and its sampler kept the replay), and the current span while its body runs, so the body's own spans (its
  queries, its HTTP calls) nest under it. Attributes ``workflow.name``, ``workflow.instance.id``,
  ``workflow.step.key``, ``workflow.step.name``, ``workflow.step.attempt`` and
  ``workflow.step.outcome`` ("succeeded", "retrying" or "failed"); a failed attempt's exception is
  recorded on it, with the status ERROR.

Metrics (the meter ``django_workflows``), each with the attribute ``workflow.name``:

- ``workflows.steps`` (counter): steps journaled as finished, by ``workflow.step.kind`` ("do", "sleep",
  "waitForEvent") and ``workflow.step.outcome`` ("succeeded", "failed").
- ``workflows.step.retries`` (counter): failed attempts of a ``step.do`` that another attempt follows.
- ``workflows.instances.created`` (counter), ``workflows.instances.ended`` (counter, by
  ``workflow.instance.status``: "complete", "errored", "terminated").

  The counters are observable counters: each process counts in memory and reports its totals when
  the metrics are collected, so counting a step costs no SDK call.
- ``workflows.replay.duration`` (histogram, seconds): from the lease taken to the lease given back, by
  ``workflow.replay.outcome``.
- ``workflows.timer.lateness`` (histogram, seconds): how long after its wake time a replay took the lease
  to end a sleep, run a retry or time out a wait, by ``workflow.timer.kind`` ("sleep", "retry",
  "timeout").
- ``workflows.instances.queued`` (observable gauge): instances queued for a replay, read by one COUNT
  query each time the metrics are collected, in ``workflows_worker``'s process only
  (``observe_queue_depth``).

The counters and histograms come from the signals (``django_workflows.signals``), sent once the writes
committed, except ``workflows.steps``, which the engine's report counts directly at the same moment
(``lifecycle.step_counter``: a signal's dispatch costs more than the count); the spans from the engine's
one hook around a replay and around a step's body.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from django.db import DatabaseError, connections, router
from django.db.models import Count

from django_workflows import signals
from django_workflows.foundations.conf import workflow_settings
from django_workflows.shared import lifecycle
from django_workflows.shared.definition import registry
from django_workflows.errors import MissingExtra, require_extra
from django_workflows.models import Instance, InstanceStatus

if TYPE_CHECKING:
    from opentelemetry.trace import Span

# The global meter provider until an SDK sets one, if the API names it where it used to.
_ProxyMeterProvider: Any = None
try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:
    AVAILABLE = False
else:
    AVAILABLE = True
"""Whether ``opentelemetry-api`` could be imported, once, as this module was."""

if AVAILABLE:
    try:
        # Not part of the API's public names: where it moved, the metrics are counted from the start, as
        # if something collected them.
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:
        pass

ENABLED = False
"""Whether spans are made and metrics recorded: set by ``install()``. The engine looks at it once per
replay, and makes no other call here when it is False."""

INSTRUMENTATION = "django_workflows"

# Seconds: a replay takes milliseconds to minutes, a timer fires milliseconds to minutes late (more if
# no worker ran meanwhile).
REPLAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
LATENESS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

# The tracer and the _Instruments while telemetry is on, None while it is off; the functions that use them
# run only while it is on (ENABLED).
_tracer: Any = None
_instruments: Any = None
# Whether install() was given the tracer provider (else the global one is used, once an SDK sets it).
_tracer_provider_given = False
_observing_queue = False


class _Totals:
    """A counter kept in this process, by attribute values, and reported as an observable counter when
    the metrics are collected: counting a step costs a dict update under a lock, not the SDK's
    measurement (several microseconds, most of it hashing the attributes)."""

    def __init__(self, meter, name: str, unit: str, description: str, *keys: str):
        self.keys = keys
        self.lock = threading.Lock()
        self.counts: dict[tuple, int] = {}
        meter.create_observable_counter(name, callbacks=[self.observe], unit=unit, description=description)

    def add(self, *values) -> None:
        with self.lock:
            self.counts[values] = self.counts.get(values, 0) + 1

    def observe(self, options):
        with self.lock:
            counts = list(self.counts.items())
        return [otel_metrics.Observation(count, dict(zip(self.keys, values, strict=True)))
                for values, count in counts]


class _Instruments:
    def __init__(self, meter):
        self.meter = meter
        self.steps = _Totals(meter, "workflows.steps", "{step}", "Steps journaled as finished",
                             "workflow.name", "workflow.step.kind", "workflow.step.outcome")
        self.retries = _Totals(meter, "workflows.step.retries", "{attempt}",
                               "Failed step attempts that another attempt follows", "workflow.name")
        self.created = _Totals(meter, "workflows.instances.created", "{instance}", "Instances created",
                               "workflow.name")
        self.ended = _Totals(meter, "workflows.instances.ended", "{instance}",
                             "Instances that ended: complete, errored or terminated", "workflow.name",
                             "workflow.instance.status")
        self.replay_duration = meter.create_histogram(
            "workflows.replay.duration", unit="s",
            description="Replays, from the lease taken to the lease given back",
            explicit_bucket_boundaries_advisory=REPLAY_BUCKETS)
        self.timer_lateness = meter.create_histogram(
            "workflows.timer.lateness", unit="s",
            description="How long after its wake time a replay took the lease to end a sleep, run a retry or "
                        "time out a wait", explicit_bucket_boundaries_advisory=LATENESS_BUCKETS)
        self.queued = None
        # Whether install() was given the meter provider, and whether the receivers count yet.
        self.provider_given = self.counting = False
        # Attribute sets by their values, built once.
        self.attributes: dict[tuple, dict] = {}

    def attributes_of(self, *pairs) -> dict:
        found = self.attributes.get(pairs)
        if found is None:
            found = self.attributes[pairs] = dict(zip(pairs[::2], pairs[1::2], strict=True))
        return found


# -- switching it on and off ----------------------------------------------------------------------

def install(tracer_provider=None, meter_provider=None) -> bool:
    """Turn telemetry on or off as the ``OPENTELEMETRY`` setting says, and return whether it is on.

    None (the default) turns it on if ``opentelemetry-api`` is installed; True requires it (a
    ``MissingExtra`` error if it is missing); False turns it off. ``tracer_provider`` and
    ``meter_provider`` replace the global providers (tests pass the SDK's with in-memory exporters).
    Called again, it starts over with the providers it is given."""
    global ENABLED, _tracer, _instruments, _tracer_provider_given
    uninstall()
    wanted = workflow_settings.OPENTELEMETRY
    if wanted is False:
        return False
    if not AVAILABLE:
        if wanted is None:
            return False
        part = "DJANGO_WORKFLOWS['OPENTELEMETRY'] = True"
        require_extra("opentelemetry.trace", "otel", part)
        raise MissingExtra(f"{part} needs the 'opentelemetry-api' package, which failed to import: "
                           "pip install 'django-durable-workflows[otel]'.", module="opentelemetry",
                           extra="otel")
    _tracer = otel_trace.get_tracer(INSTRUMENTATION, tracer_provider=tracer_provider)
    _tracer_provider_given = tracer_provider is not None
    _instruments = _Instruments(otel_metrics.get_meter(INSTRUMENTATION, meter_provider=meter_provider))
    _instruments.provider_given = meter_provider is not None
    ENABLED = True
    _count_once_collected()
    if _observing_queue:
        _register_queue_gauge()
    return True


def uninstall() -> None:
    """Turn telemetry off: no more spans, no more metrics."""
    global ENABLED, _tracer, _instruments
    ENABLED = False
    lifecycle.step_counter = None
    for signal, receiver in _RECEIVERS:
        signal.disconnect(sender=Instance, dispatch_uid=f"{__name__}.{receiver.__name__}")
    _tracer = _instruments = None


def _count_once_collected() -> None:
    """Start counting (the signals' receivers connected, the engine's step counter set) once something
    collects the metrics: a meter provider given to install(), or an SDK's set as the global one, which
    is looked at again at each replay until then. Before, the API's own provider drops every
    measurement, and sending the signals to receivers that fed it was 3 % of an inline create() on SQLite."""
    if _instruments.counting or not (_instruments.provider_given or _ProxyMeterProvider is None
                                     or not isinstance(otel_metrics.get_meter_provider(), _ProxyMeterProvider)):
        return
    _instruments.counting = True
    for signal, receiver in _RECEIVERS:
        signal.connect(receiver, sender=Instance, weak=False, dispatch_uid=f"{__name__}.{receiver.__name__}")
    # Finished steps are counted by the engine's report directly, not through step_succeeded and
    # step_failed (lifecycle.step_counter says why).
    lifecycle.step_counter = _instruments.steps.add


# -- spans ----------------------------------------------------------------------------------------

T = TypeVar("T")


class Claimed(Protocol):
    """What a replay's span says of its instance: the lease's ``leases.Claim`` (read only)."""

    @property
    def pk(self) -> int: ...
    @property
    def workflow_name(self) -> str: ...
    @property
    def instance_id(self) -> str: ...
    @property
    def epoch(self) -> int: ...


def start_replay(claim: Claimed) -> Span | None:
    """Start a replay's span (``claim`` is the lease's ``leases.Claim``); None while no SDK has set the
    global tracer provider (and install() was given none): the API's own hands out spans that record
    nothing, and making one, making it current and ending it cost about 2 % of an inline create() on
    SQLite. The provider is looked at per replay, so a project that sets it after Django's setup gets
    its spans."""
    _count_once_collected()
    if not _tracer_provider_given and isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider):
        return None
    return _tracer.start_span("workflow.replay", attributes={
        "workflow.name": claim.workflow_name, "workflow.instance.id": claim.instance_id,
        "workflow.instance.pk": claim.pk, "workflow.replay.epoch": claim.epoch,
    })


def end_replay(span, outcome: str, failure: BaseException | None) -> None:
    span.set_attribute("workflow.replay.outcome", outcome)
    if failure is not None:
        _record(span, failure)
    span.end()


def start_attempt(replay_span, claim, key: str, name: str, attempt: int):
    """Start the span of a step attempt, a child of its replay's span whichever thread runs it."""
    return _tracer.start_span("workflow.step", context=otel_trace.set_span_in_context(replay_span),
                              attributes={"workflow.name": claim.workflow_name,
                                          "workflow.instance.id": claim.instance_id, "workflow.step.key": key,
                                          "workflow.step.name": name, "workflow.step.attempt": attempt})


def end_attempt(span, ended_ns: int, outcome: str, failure: BaseException | None) -> None:
    """End an attempt's span when its body ended, with its outcome: "succeeded", "retrying" or "failed"."""
    span.set_attribute("workflow.step.outcome", outcome)
    if failure is not None:
        _record(span, failure)
    span.end(end_time=ended_ns)


def run_in_span(span: Span, fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn(*args)`` with ``span`` as the current span."""
    token = otel_context.attach(otel_trace.set_span_in_context(span))
    try:
        return fn(*args)
    finally:
        otel_context.detach(token)


def _record(span, failure: BaseException) -> None:
    span.record_exception(failure)
    span.set_status(Status(StatusCode.ERROR, f"{type(failure).__name__}: {failure}"))


# -- metrics, from the signals --------------------------------------------------------------------

def _on_step_retrying(sender, workflow_name, **kwargs):
    _instruments.retries.add(workflow_name)


def _on_timer_fired(sender, workflow_name, kind, late_by, **kwargs):
    _instruments.timer_lateness.record(late_by.total_seconds(), _instruments.attributes_of(
        "workflow.name", workflow_name, "workflow.timer.kind", kind))


def _on_replay_finished(sender, workflow_name, outcome, started, released, **kwargs):
    _instruments.replay_duration.record(max(released - started, 0.0), _instruments.attributes_of(
        "workflow.name", workflow_name, "workflow.replay.outcome", str(outcome)))


def _on_created(sender, workflow_name, **kwargs):
    _instruments.created.add(workflow_name)


def _ended(status: str):
    def on_ended(sender, workflow_name, **kwargs):
        _instruments.ended.add(workflow_name, status)

    on_ended.__name__ = f"_on_{status}"
    return on_ended


_RECEIVERS = (
    (signals.step_retrying, _on_step_retrying),
    (signals.timer_fired, _on_timer_fired),
    (signals.replay_finished, _on_replay_finished),
    (signals.instance_created, _on_created),
    (signals.instance_completed, _ended(InstanceStatus.COMPLETE.value)),
    (signals.instance_errored, _ended(InstanceStatus.ERRORED.value)),
    (signals.instance_terminated, _ended(InstanceStatus.TERMINATED.value)),
)


# -- queue depth ----------------------------------------------------------------------------------

def observe_queue_depth() -> bool:
    """Report the instances queued for a replay, by workflow, as the observable gauge
    ``workflows.instances.queued``; return whether it is reported.

    ``workflows_worker`` calls it: one process per machine, not every web and cluster process. Its
    callback makes one indexed COUNT query each time the metrics are collected (every 60 s with the
    SDK's ``PeriodicExportingMetricReader``): no query otherwise."""
    global _observing_queue
    _observing_queue = True
    if ENABLED:
        _register_queue_gauge()
    return ENABLED


def _register_queue_gauge() -> None:
    if _instruments.queued is None:
        _instruments.queued = _instruments.meter.create_observable_gauge(
            "workflows.instances.queued", callbacks=[_observe_queued], unit="{instance}",
            description="Instances queued for a replay")


def _observe_queued(options):
    alias = router.db_for_read(Instance)
    counts = dict.fromkeys(registry.names(), 0)
    try:
        counts.update(Instance.objects.using(alias).filter(status=InstanceStatus.QUEUED).order_by()
                      .values_list("workflow_name").annotate(n=Count("id")))
    except DatabaseError:
        return []
    finally:
        # The SDK collects in a thread of its own: its connection is not kept open between collections.
        connection = connections[alias]
        if threading.current_thread() is not threading.main_thread() and not connection.in_atomic_block:
            connection.close()
    return [otel_metrics.Observation(count, {"workflow.name": name}) for name, count in counts.items()]

