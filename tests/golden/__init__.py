"""Golden journals: the rows of half-run instances, as a release wrote them, replayed by every later one.

Each directory ``<version>-<label>`` holds one JSON file per scenario, written by ``record.py`` with the
code of that release: the rows of the scenario's instances (``Instance``, ``Step``, ``Event``) as the
database stored them, what happens to the instances afterwards (events sent, the clock advanced), and
what they end with. ``tests/integration/test_golden_journals.py`` loads each file's rows into the test
database and drives the instances to their end with the code of today.

A release's directory is never recorded again once committed: its rows are what that release wrote,
and a later encoding of the same instances would prove nothing. A new release adds a directory of its
own (see ``record.py``).
"""
