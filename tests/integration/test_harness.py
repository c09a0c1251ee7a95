"""The test harness runs what a worker runs: timers fire through the wake-up code of
``store.dispatch``, at the test clock's time, in wake-time order and in the worker's batches."""

from django_workflows import workflows
from django_workflows.models import Instance
from django_workflows.store import dispatch


def test_timers_fire_through_the_workers_wake_up_code(workflows_env, monkeypatch):
    woken = []
    real_wake_due = dispatch.wake_due

    def recorded(now=None):
        count = real_wake_due(now)
        woken.append((now, count))
        return count

    monkeypatch.setattr(dispatch, "wake_due", recorded)
    instance = workflows.get("sleeper").create(params={"duration": "1 hour"})
    workflows_env.run_until_idle()
    assert instance.status()["status"] == "waiting"
    workflows_env.advance("1 hour")
    assert instance.status()["output"] == "after"
    assert (workflows_env.now, 1) in woken


def test_more_due_instances_than_a_wake_batch_all_run_in_wake_time_order(workflows_env, settings):
    settings.DJANGO_WORKFLOWS = {**settings.DJANGO_WORKFLOWS, "WAKE_BATCH": 2}
    sleepers = [workflows.get("sleeper").create(id=f"s{minutes}", params={"duration": f"{minutes} minutes"})
                for minutes in (5, 1, 4, 2, 3)]
    workflows_env.run_until_idle()
    workflows_env.advance("10 minutes")
    assert [s.status()["status"] for s in sleepers] == ["complete"] * 5
    ended = Instance.objects.order_by("ended_at", "pk").values_list("instance_id", flat=True)
    assert list(ended) == ["s1", "s2", "s3", "s4", "s5"]
