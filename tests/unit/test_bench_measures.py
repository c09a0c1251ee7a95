"""The benchmarks' own measuring helpers."""

from benchmarks.common import backend_cpu_delta, summary


def test_a_backend_that_ended_between_two_readings_does_not_make_the_cpu_negative():
    before = {101: 5.0, 102: 3.0}  # 102 ends before the second reading, with its 3 s
    after = {101: 6.5, 103: 0.25}  # 103 started in between
    assert backend_cpu_delta(before, after) == 1.75


def _part_4(rate: float) -> dict:
    return {"throughput": {"rate": summary([rate]), "worker_cpu_ms": None, "backend_cpu_ms": None}}


def test_the_report_sets_the_executors_measured_beside_django_q2():
    from benchmarks.report import executors_table

    lines = executors_table({"configs": {"postgres-orm": _part_4(300.0), "postgres-celery": _part_4(120.0)}})
    header = next(line for line in lines if line.startswith("| measure"))
    assert "django-q2" in header and "Celery executor" in header and "tasks executor" not in header
    [rate] = [line for line in lines if line.startswith("| throughput")]
    assert rate.count("|") == 4 and "300" in rate and "120" in rate
    # Nothing to set beside django-q2 when no other executor was measured.
    assert executors_table({"configs": {"postgres-orm": _part_4(300.0)}}) == []
