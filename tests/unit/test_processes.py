"""One reading of /proc, which the lease holders, the worker, the system tests and the benchmarks share."""

import os
import shutil
import subprocess
import sys

import pytest

from django_workflows.shared import processes

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads Linux's /proc")


@pytest.fixture
def child(tmp_path):
    """A sleeping child whose command name holds a space and a closing parenthesis, as a name may."""
    odd = tmp_path / "a) b"
    shutil.copy(sys.executable, odd)
    process = subprocess.Popen([str(odd), "-c", "import time; time.sleep(30)"])
    yield process
    process.kill()
    process.wait()


def test_the_fields_are_split_after_the_command_name_whatever_it_holds(child):
    fields = processes.stat_fields(child.pid)
    assert fields[processes.STATE] in ("R", "S", "D")
    assert int(fields[processes.PARENT]) == os.getpid()
    assert fields[processes.START_TICKS].isdigit()


def test_a_process_is_found_under_its_parent(child):
    assert child.pid in processes.children_of(os.getpid())
    assert child.pid in processes.descendants(os.getpid())
    assert processes.descendants(child.pid) == [child.pid]
    assert child.pid in processes.process_table()


def test_a_reaped_process_cannot_be_read(child):
    child.kill()
    child.wait()
    with pytest.raises(FileNotFoundError):
        processes.stat_fields(child.pid)
    assert child.pid not in processes.process_ids()
