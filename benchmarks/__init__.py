"""The benchmark suite of issue 7: ``make bench`` (``python -m benchmarks``), ``make bench QUICK=1``.

``python -m benchmarks`` (``driver.py``) creates the databases, runs each measurement in a child
process configured by ``benchmarks.settings`` (``inproc.py``: parts 1, 2, 3 and 6 in one process;
``cluster.py``: parts 4, 5 and 7 through real ``workflows_worker`` subprocesses), and writes
``REPORT.md`` and ``report.png`` (``report.py``).
"""
