"""The benchmarks' own measuring helpers."""

from benchmarks.common import backend_cpu_delta


def test_a_backend_that_ended_between_two_readings_does_not_make_the_cpu_negative():
    before = {101: 5.0, 102: 3.0}  # 102 ends before the second reading, with its 3 s
    after = {101: 6.5, 103: 0.25}  # 103 started in between
    assert backend_cpu_delta(before, after) == 1.75
