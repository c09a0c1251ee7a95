"""OpenTelemetry (django_workflows.shared.telemetry): spans and metrics through the SDK's in-memory exporter and
reader, on a real database; and nothing at all without the package."""

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from django_workflows import WorkflowEntrypoint, signals, workflows
from django_workflows.models import Instance
from django_workflows.shared import telemetry
from django_workflows.errors import MissingExtra
from django_workflows.engine.replay import replay
from django_workflows.testing import run_workflows
from tests.testapp.workflows import calls

ROOT = Path(__file__).resolve().parents[2]
# The tracer a step body uses for its own spans (an application's instrumentation), set by ``otel``.
body_tracer = SimpleNamespace(tracer=trace.NoOpTracer())


class TelemetryTour(WorkflowEntrypoint):
    """A retry after a delay, a sleep, a wait for an event, then complete; the second attempt opens a
    span of its own, which must nest under the attempt's."""

    name = "telemetry-tour"

    def run(self, event, step):
        def charge():
            calls.update(["telemetry-charge"])
            if calls["telemetry-charge"] == 1:
                raise ValueError("card network down")
            with body_tracer.tracer.start_as_current_span("body.http-call"):
                return 120

        charged = step.do("charge", charge,
                          config={"retries": {"limit": 3, "delay": "10 seconds", "backoff": "constant"}})
        step.sleep("cool off", "1 hour")
        step.wait_for_event("approval", "approve", timeout="1 day")
        return charged


class TelemetryAll(WorkflowEntrypoint):
    """step.all: first attempts run in threads of their own."""

    name = "telemetry-all"

    def run(self, event, step):
        return step.all([("left", lambda: "l"), ("right", lambda: "r"), ("middle", lambda: "m")])


@pytest.fixture
def otel():
    """The SDK's tracer and meter providers with in-memory exporters, for the test; the global (no-op)
    providers again afterwards."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    assert telemetry.install(tracer_provider=tracer_provider, meter_provider=meter_provider)
    # The step body's own tracer: the same provider, as an application's instrumentation would use.
    body_tracer.tracer = tracer_provider.get_tracer("test-body")
    try:
        yield SimpleNamespace(exporter=exporter, reader=reader, tracer_provider=tracer_provider)
    finally:
        body_tracer.tracer = trace.NoOpTracer()
        telemetry.install()
        meter_provider.shutdown()
        tracer_provider.shutdown()


@pytest.fixture
def env(transactional_db):
    with run_workflows() as test_env:
        yield test_env


def _spans(otel, name):
    return [span for span in otel.exporter.get_finished_spans() if span.name == name]


def _points(otel, metric_name) -> dict:
    """``{attribute values: value}`` of a metric's data points (a histogram's: its count and sum)."""
    data = otel.reader.get_metrics_data()
    points = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != metric_name:
                    continue
                for point in metric.data.data_points:
                    key = frozenset(point.attributes.items())
                    points[key] = (point.count, point.sum) if hasattr(point, "bucket_counts") else point.value
    return points


def k(attributes: dict) -> frozenset:
    """A data point's key in ``_points``."""
    return frozenset(attributes.items())


def _run_tour(env):
    instance = workflows.get("telemetry-tour").create(id="traced")
    env.run_until_idle()
    env.clock.advance(timedelta(seconds=12))
    env.run_until_idle()
    env.clock.advance(timedelta(hours=1, seconds=30))
    env.run_until_idle()
    instance.send_event(type="approve", payload={})
    env.run_until_idle()
    assert instance.status()["status"] == "complete"
    return instance


def test_a_span_per_replay_and_per_attempt_under_it(env, otel):
    instance = _run_tour(env)
    replays = sorted(_spans(otel, "workflow.replay"), key=lambda span: span.start_time)
    assert [span.attributes["workflow.replay.outcome"] for span in replays] == [
        "waiting", "waiting", "waiting", "complete"]
    # Each replay takes the lease with the next epoch.
    assert [span.attributes["workflow.replay.epoch"] for span in replays] == [1, 2, 3, 4]
    for span in replays:
        assert dict(span.attributes) == {
            "workflow.name": "telemetry-tour", "workflow.instance.id": "traced",
            "workflow.instance.pk": instance.pk,
            "workflow.replay.epoch": span.attributes["workflow.replay.epoch"],
            "workflow.replay.outcome": span.attributes["workflow.replay.outcome"],
        }
        assert span.parent is None and span.status.status_code == StatusCode.UNSET
    assert len({span.context.trace_id for span in replays}) == 4

    first, second = sorted(_spans(otel, "workflow.step"), key=lambda span: span.start_time)
    # Each attempt's span is a child of the span of the replay that ran it.
    assert first.parent.span_id == replays[0].context.span_id
    assert first.context.trace_id == replays[0].context.trace_id
    assert second.parent.span_id == replays[1].context.span_id
    assert dict(first.attributes) == {
        "workflow.name": "telemetry-tour", "workflow.instance.id": "traced", "workflow.step.key": "charge-1",
        "workflow.step.name": "charge", "workflow.step.attempt": 1, "workflow.step.outcome": "retrying"}
    assert first.status.status_code == StatusCode.ERROR
    assert [event.name for event in first.events] == ["exception"]
    assert first.events[0].attributes["exception.type"] == "ValueError"
    assert first.events[0].attributes["exception.message"] == "card network down"
    assert second.attributes["workflow.step.attempt"] == 2
    assert second.attributes["workflow.step.outcome"] == "succeeded"
    assert second.status.status_code == StatusCode.UNSET and not second.events
    # The step body's own span nests under its attempt's.
    [body] = _spans(otel, "body.http-call")
    assert body.parent.span_id == second.context.span_id
    assert first.start_time >= replays[0].start_time and first.end_time <= replays[0].end_time


def test_the_metrics_of_steps_retries_replays_and_timers(env, otel):
    _run_tour(env)
    tour = {"workflow.name": "telemetry-tour"}
    assert _points(otel, "workflows.steps") == {
        k({**tour, "workflow.step.kind": "do", "workflow.step.outcome": "succeeded"}): 1,
        k({**tour, "workflow.step.kind": "sleep", "workflow.step.outcome": "succeeded"}): 1,
        k({**tour, "workflow.step.kind": "waitForEvent", "workflow.step.outcome": "succeeded"}): 1,
    }
    assert _points(otel, "workflows.step.retries") == {k(tour): 1}
    assert _points(otel, "workflows.instances.created") == {k(tour): 1}
    assert _points(otel, "workflows.instances.ended") == {
        k({**tour, "workflow.instance.status": "complete"}): 1}
    # The manual clock: the retry ran 2 s late, the sleep ended 30 s late.
    assert _points(otel, "workflows.timer.lateness") == {
        k({**tour, "workflow.timer.kind": "retry"}): (1, 2.0),
        k({**tour, "workflow.timer.kind": "sleep"}): (1, 30.0),
    }
    durations = _points(otel, "workflows.replay.duration")
    assert {key: count for key, (count, _) in durations.items()} == {
        k({**tour, "workflow.replay.outcome": "waiting"}): 3,
        k({**tour, "workflow.replay.outcome": "complete"}): 1,
    }
    assert all(0 <= total < 60 for _, total in durations.values())


def test_counting_steps_dispatches_no_signal(env, otel, monkeypatch):
    """A step is the engine's most frequent report: the metrics count it without the dispatch of
    step_succeeded, whose receivers' lookup and keyword arguments cost several times the count."""
    sent = []
    for signal in (signals.step_succeeded, signals.step_failed):
        monkeypatch.setattr(signal, "send_robust", lambda sender, _s=signal, **kwargs: sent.append(_s) or [])
    workflows.get("three-steps").create(id="counted")
    env.run_until_idle()
    assert sent == []
    assert _points(otel, "workflows.steps") == {
        k({"workflow.name": "three-steps", "workflow.step.kind": "do", "workflow.step.outcome": "succeeded"}): 3}


def test_an_errored_instance_and_a_failed_step_are_recorded(env, otel):
    instance = workflows.get("uncaught").create(id="broken")
    env.run_until_idle()
    assert instance.status()["status"] == "errored"
    [replay] = _spans(otel, "workflow.replay")
    assert replay.attributes["workflow.replay.outcome"] == "errored"
    assert replay.status.status_code == StatusCode.ERROR
    assert replay.status.description == "RuntimeError: it broke"
    assert [event.attributes["exception.type"] for event in replay.events] == ["RuntimeError"]
    [attempt] = _spans(otel, "workflow.step")
    assert attempt.attributes["workflow.step.outcome"] == "failed"
    assert attempt.status.status_code == StatusCode.ERROR
    assert attempt.parent.span_id == replay.context.span_id
    steps = _points(otel, "workflows.steps")
    assert steps == {
        k({"workflow.name": "uncaught", "workflow.step.kind": "do", "workflow.step.outcome": "failed"}): 1}
    assert _points(otel, "workflows.instances.ended") == {
        k({"workflow.name": "uncaught", "workflow.instance.status": "errored"}): 1}
    assert _points(otel, "workflows.step.retries") == {}


def test_attempts_run_in_other_threads_are_children_of_the_replay(env, otel):
    instance = workflows.get("telemetry-all").create(id="side-by-side")
    env.run_until_idle()
    assert instance.status()["output"] == ["l", "r", "m"]
    [replay] = _spans(otel, "workflow.replay")
    attempts = _spans(otel, "workflow.step")
    keys = sorted(span.attributes["workflow.step.key"] for span in attempts)
    assert keys == ["left-1", "middle-1", "right-1"]
    assert {span.parent.span_id for span in attempts} == {replay.context.span_id}
    assert {span.context.trace_id for span in attempts} == {replay.context.trace_id}


def test_spans_and_metrics_cost_no_statement(workflows_env, otel):
    """The same statements as tests/integration/test_queries.py counts, with the SDK recording."""
    small = workflows.get("loop").create(params={"n": 1})
    big = workflows.get("loop").create(params={"n": 101})
    workflows_env.executor.reset()
    counts = {}
    for instance in (small, big):
        with CaptureQueriesContext(connection) as ctx:
            replay(instance.pk)
        counts[instance.pk] = len(ctx.captured_queries)
    # take the lease, one INSERT per step, finish
    assert counts == {small.pk: 3, big.pk: 103}
    assert len(_spans(otel, "workflow.step")) == 102


def test_queue_depth_is_read_when_the_metrics_are_collected(env, otel, monkeypatch):
    monkeypatch.setattr(telemetry, "_observing_queue", False)
    assert _points(otel, "workflows.instances.queued") == {}
    assert telemetry.observe_queue_depth()
    for number in range(3):
        workflows.get("three-steps").create(id=f"queued-{number}")
    queued = _points(otel, "workflows.instances.queued")
    assert queued[k({"workflow.name": "three-steps"})] == 3
    assert queued[k({"workflow.name": "telemetry-tour"})] == 0  # every registered workflow, even at 0
    env.run_until_idle()
    assert _points(otel, "workflows.instances.queued")[k({"workflow.name": "three-steps"})] == 0


def test_off_when_the_package_is_missing_or_the_setting_says_so(env, otel, monkeypatch, settings):
    monkeypatch.setattr(telemetry, "AVAILABLE", False)
    assert telemetry.install() is False
    assert telemetry.ENABLED is False
    assert not signals.step_succeeded.receivers and not signals.replay_finished.receivers
    _run_tour(env)
    # Only the step body's own span: none of the engine's.
    assert [span.name for span in otel.exporter.get_finished_spans()] == ["body.http-call"]
    assert _points(otel, "workflows.steps") == {} and _points(otel, "workflows.replay.duration") == {}

    settings.DJANGO_WORKFLOWS = {"OPENTELEMETRY": True}
    with pytest.raises(MissingExtra, match=r"django-durable-workflows\[otel\]"):
        telemetry.install()

    monkeypatch.setattr(telemetry, "AVAILABLE", True)
    settings.DJANGO_WORKFLOWS = {"OPENTELEMETRY": False}
    assert telemetry.install() is False and telemetry.ENABLED is False


def _run_script(script: str) -> dict:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT),
           "TEST_DATABASE_NAME": str(connection.settings_dict["NAME"])}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_no_replay_span_is_made_while_no_sdk_sets_the_tracer_provider(transactional_db):
    """The API's own provider hands out spans that record nothing: a replay makes none. Given a provider,
    or once an SDK sets the global one (the next test, in a process of its own), it makes its span."""
    claim = SimpleNamespace(workflow_name="three-steps", instance_id="no-sdk", pk=1, epoch=1)
    assert telemetry.install()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert telemetry.start_replay(claim) is None
    tracer_provider = TracerProvider()
    try:
        assert telemetry.install(tracer_provider=tracer_provider)
        span = telemetry.start_replay(claim)
        assert span is not None and span.is_recording()
        span.end()
    finally:
        telemetry.install()
        tracer_provider.shutdown()
    assert telemetry.start_replay(claim) is None


def test_nothing_is_counted_while_no_sdk_sets_the_meter_provider(transactional_db):
    """The API's own meter provider drops every measurement: the engine's signals reach no receiver of the
    metrics, and no step counter is set. Given a meter provider (or once an SDK sets the global one, the
    next test), they count."""
    from django_workflows.shared import lifecycle

    def counting():
        return signals.instance_created.has_listeners(Instance) or lifecycle.step_counter is not None

    assert telemetry.install() and telemetry.ENABLED
    assert not counting()
    telemetry.start_replay(SimpleNamespace(workflow_name="three-steps", instance_id="x", pk=1, epoch=1))
    assert not counting()  # looked at again at a replay: still the API's own
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    try:
        assert telemetry.install(meter_provider=meter_provider)
        assert counting() and lifecycle.step_counter is not None
    finally:
        telemetry.install()
        meter_provider.shutdown()
    assert not counting()


def test_the_global_providers_set_after_django_starts_are_used(transactional_db):
    """A project that configures the SDK after Django's setup (in wsgi.py, say) gets the spans and metrics."""
    script = """
import json
import django
django.setup()
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from django_workflows import workflows
from django_workflows.models import Instance
from django_workflows.shared import telemetry
from django_workflows.testing import run_workflows
assert telemetry.ENABLED  # installed by the app's ready(), on the global providers
exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
with run_workflows() as env:
    workflows.get("three-steps").create(id="late-sdk")
    env.run_until_idle()
steps = {}
for resource in reader.get_metrics_data().resource_metrics:
    for scope in resource.scope_metrics:
        for metric in scope.metrics:
            if metric.name == "workflows.steps":
                steps = {point.attributes["workflow.step.outcome"]: point.value
                         for point in metric.data.data_points}
print(json.dumps({"spans": sorted(span.name for span in exporter.get_finished_spans()), "steps": steps}))
"""
    assert _run_script(script) == {"spans": ["workflow.replay"] + ["workflow.step"] * 3,
                                   "steps": {"succeeded": 3}}


def test_without_the_package_nothing_of_it_is_imported(transactional_db):
    """A process where opentelemetry cannot be imported runs workflows, and imports none of it."""
    script = """
import sys
sys.modules["opentelemetry"] = None  # import opentelemetry raises ImportError, as if not installed
import django
django.setup()
from django_workflows import workflows
from django_workflows.models import Instance
from django_workflows.shared import telemetry
from django_workflows.testing import run_workflows
with run_workflows() as env:
    instance = workflows.get("three-steps").create(id="no-otel")
    env.run_until_idle()
    status = instance.status()["status"]
loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry.") and sys.modules[name])
print(json.dumps({"status": status, "available": telemetry.AVAILABLE, "enabled": telemetry.ENABLED,
                  "loaded": loaded, "blocked": sys.modules["opentelemetry"] is None}))
"""
    assert _run_script("import json\n" + script) == {
        "status": "complete", "available": False, "enabled": False, "loaded": [], "blocked": True}


def test_a_setting_that_is_not_none_or_a_bool_is_reported(settings):
    from django_workflows.surfaces.checks import check_settings

    settings.DJANGO_WORKFLOWS = {"OPENTELEMETRY": "yes"}
    assert [message.id for message in check_settings()] == ["django_workflows.E025"]
    settings.DJANGO_WORKFLOWS = {"OPENTELEMETRY": False}
    assert check_settings() == []
