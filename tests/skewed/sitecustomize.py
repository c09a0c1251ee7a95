"""Loaded by the processes that tests/system/test_clock_skew.py runs under ``faketime``.

With libfaketime and Python 3.11, ``time.sleep`` fails with EINVAL (it sleeps on an absolute
CLOCK_MONOTONIC deadline that libfaketime mangles); ``select`` with a timeout sleeps as well.
"""

import select
import time


def _sleep(seconds):
    select.select([], [], [], max(0.0, seconds))


time.sleep = _sleep
