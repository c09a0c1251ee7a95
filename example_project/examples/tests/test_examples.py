"""Each example workflow on the test clock: success, retries, timeouts, compensation."""

import pytest

from django_workflows import workflows
from django_workflows.models import Step
from examples.models import ServiceCall


def calls(service):
    return list(ServiceCall.objects.filter(service=service).values_list("succeeded", flat=True))


@pytest.fixture
def fail(settings):
    def plan(value):
        settings.EXAMPLE_SERVICES_FAIL = value

    plan("")
    return plan


def test_document_pipeline_succeeds(workflows_env, fail):
    instance = workflows.get("document-pipeline").create(id="doc", params={"url": "https://e.com/a.pdf"})
    workflows_env.run_until_idle()
    assert instance.status()["output"] == {"summary": "Summary: The text of https://e.com/a.pdf.", "words": 4}
    assert calls("notify") == [True]


def test_document_pipeline_retries_the_summary_with_exponential_backoff(workflows_env, fail):
    fail("summarize=3")
    instance = workflows.get("document-pipeline").create(id="doc", params={"url": "u"})
    workflows_env.run_until_idle()
    for delay in (2, 4, 8):  # 2 s, then doubling
        assert instance.status()["status"] == "waiting"
        workflows_env.advance(f"{delay - 1} seconds")
        assert len(calls("summarize")) == [2, 4, 8].index(delay) + 1
        workflows_env.advance("1 second")
    assert instance.status()["status"] == "complete"
    assert calls("summarize") == [False, False, False, True]
    assert calls("parse") == [True]  # not run again by the replays


def test_document_pipeline_errors_when_the_summarizer_stays_down(workflows_env, fail):
    fail("summarize=always")
    instance = workflows.get("document-pipeline").create(id="doc", params={"url": "u"})
    workflows_env.run_until_idle()
    workflows_env.advance("1 minute")
    assert instance.status()["error"]["name"] == "ServiceError"
    assert len(calls("summarize")) == 5 and calls("notify") == []


@pytest.mark.parametrize("outcome, expected", [("approved", "charged"), ("rejected", "rejected")])
def test_payment_approval_decided(workflows_env, fail, outcome, expected):
    instance = workflows.get("payment-approval").create(id="pay", params={"amount": 120})
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("71 hours")
    instance.send_event(type="manager-approval", payload={"outcome": outcome, "comment": "ok"})
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == expected
    assert calls("charge") == ([True] if outcome == "approved" else [])


def test_payment_approval_times_out_after_72_hours(workflows_env, fail):
    instance = workflows.get("payment-approval").create(id="pay", params={"amount": 120})
    workflows_env.run_until_idle()
    workflows_env.advance("72 hours")
    assert instance.status()["output"] == {"status": "expired"}
    assert calls("charge") == []


def test_payment_approval_retries_the_charge(workflows_env, fail):
    fail("charge=2")
    instance = workflows.get("payment-approval").create(id="pay", params={"amount": 120})
    workflows_env.run_until_idle()
    instance.send_event(type="manager-approval", payload={"outcome": "approved"})
    workflows_env.advance("10 seconds")
    assert instance.status()["output"]["status"] == "charged"
    assert calls("charge") == [False, False, True]


def test_payment_approval_refuses_an_invalid_amount(workflows_env, fail):
    instance = workflows.get("payment-approval").create(id="pay", params={"amount": -5})
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == "invalid"


def test_order_saga_confirms(workflows_env, fail):
    instance = workflows.get("order-saga").create(id="o", params={"order_id": 1, "items": ["a"], "amount": 5})
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == "confirmed"
    assert calls("refund") == [] and calls("release") == []


def test_order_saga_compensates_newest_first_when_confirm_fails(workflows_env, fail):
    fail("confirm=always")
    instance = workflows.get("order-saga").create(id="o", params={"order_id": 1, "items": ["a"], "amount": 5})
    workflows_env.run_until_idle()
    workflows_env.advance("5 seconds")
    output = instance.status()["output"]
    assert output["status"] == "compensated" and output["undone"] == ["charge", "reserve-inventory"]
    assert len(calls("confirm")) == 3  # limit 2: three attempts
    assert calls("refund") == [True] and calls("release") == [True]
    rollbacks = Step.objects.filter(key__startswith="rollback ").order_by("id").values_list("key", flat=True)
    assert list(rollbacks) == ["rollback charge-1", "rollback reserve-inventory-1"]


def test_order_saga_compensates_only_what_was_done(workflows_env, fail):
    fail("charge=always")
    instance = workflows.get("order-saga").create(id="o", params={"order_id": 1, "items": ["a"], "amount": 5})
    workflows_env.run_until_idle()
    workflows_env.advance("5 seconds")
    assert instance.status()["output"]["undone"] == ["reserve-inventory"]
    assert calls("refund") == []


@pytest.mark.parametrize("event_type, status", [("payment-success", "paid"), ("payment-failure", "failed")])
def test_payment_race(workflows_env, event_type, status):
    instance = workflows.get("payment-race").create(id="race")
    workflows_env.run_until_idle()
    instance.send_event(type=event_type, payload={"reason": "card"})
    workflows_env.run_until_idle()
    assert instance.status()["output"]["status"] == status


def test_payment_race_times_out_after_4_hours(workflows_env):
    instance = workflows.get("payment-race").create(id="race")
    workflows_env.run_until_idle()
    workflows_env.advance("4 hours")
    assert instance.status()["output"] == {"status": "timed-out"}


def test_flaky_step_fails_twice_then_succeeds(workflows_env):
    instance = workflows.get("flaky-step").create(id="f")
    workflows_env.run_until_idle()
    workflows_env.advance("1 second")  # linear: 1 s, then 2 s
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("2 seconds")
    assert instance.status()["output"] == "third time lucky"
    assert calls("flaky") == [False, False, True]


def test_plain_sleep(workflows_env):
    instance = workflows.get("plain-sleep").create(id="s", params={"duration": "10 seconds"})
    workflows_env.run_until_idle()
    workflows_env.advance("9 seconds")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 second")
    assert instance.status()["output"] == "awake"


def test_the_python_sdk_dag_runs_as_cloudflare_writes_it(workflows_env):
    instance = workflows.get("python-dag").create()
    workflows_env.run_until_idle()
    workflows_env.advance("2 seconds")
    assert instance.status()["output"] == "dep1 dep2 (attempt 1 of final_step)"
    keys = Step.objects.order_by("id").values_list("key", flat=True)
    assert list(keys) == ["demo sleep-1", "dep_1-1", "dep_2-1", "final_step-1"]


def test_cloudflare_s_error_handling_example_runs_ported_by_its_import_line(workflows_env, capsys):
    instance = workflows.get("error-handling-workflow").create()
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"  # a retry's delay: 10, 20, 40, 80, 160 seconds
    workflows_env.advance("309 seconds")
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 second")
    assert instance.status() == {"status": "complete", "output": None, "error": None}
    out = capsys.readouterr().out
    assert out.count("Executing my_failing") == 6
    assert out.count("Successfully caught TypeError: Intentional error in my_failing") == 1
    (failing,) = Step.objects.filter(name="my_failing")
    assert failing.status == "failed" and len(failing.attempts) == 6
