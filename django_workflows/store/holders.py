"""Who holds a lease (``Holder``): the host, the process and the thread.

A worker reclaims at once the leases of this host's processes that are gone, instead of waiting for
them to expire; the host names the boot and the PID namespace as well, so that a process id is only
judged where it means something.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

from django_workflows.shared import processes


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _host_identity() -> str:
    """This host as a lease names it: the host name, then (on Linux) the boot and the PID namespace.

    The boot and the namespace say where a process id means something: a lease taken on another
    machine with our host name, in another container that shares it (host networking), or before a
    reboot, is not ours to judge.
    Without /proc the host name stands alone, and nothing is reclaimed early.
    """
    name = socket.gethostname()[:100]
    try:
        boot = _read("/proc/sys/kernel/random/boot_id").strip().replace("-", "")[:12]
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
        # /proc must show this process's own namespace (not a host's /proc mounted in a container),
        # or the process ids read there are not the ones the leases name.
        own_proc = os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return name
    if not boot or not namespace.isdigit() or not own_proc:
        return name
    return f"{name}/{boot}/{namespace}"


def _start_time(pid: int) -> str:
    try:
        return processes.stat_fields(pid)[processes.START_TICKS]
    except (OSError, IndexError):
        return ""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: ``host:pid:start:thread``, written in the instance's ``lease_owner``.

    ``start`` is the process's start time (clock ticks since boot, from /proc), so a process id that
    the system gave to another process since is not mistaken for the holder.
    """

    host: str
    pid: int
    start: str
    thread: int

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.start}:{self.thread}"

    @classmethod
    def parse(cls, owner: str) -> Holder | None:
        """The holder named by ``owner``, or None if it is not in this form (older leases)."""
        parts = owner.rsplit(":", 3)
        if len(parts) != 4 or not parts[1].isdigit() or not parts[3].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], int(parts[3]))

    def is_gone(self) -> bool:
        """Whether this holder's process no longer runs. Only meaningful for a holder of this host;
        in doubt, the answer is no (the lease then expires as any other)."""
        if self.pid <= 0 or not self.start:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # running, as another user
        except OSError:
            return False
        try:
            fields = processes.stat_fields(self.pid)
        except FileNotFoundError:
            return True  # exited since
        except OSError:
            return False
        if len(fields) <= processes.START_TICKS:
            return False
        # A zombie is dead, waiting for a parent that was killed with it; a different start time
        # means the process id was given to another process.
        return fields[processes.STATE] in processes.EXITED or fields[processes.START_TICKS] != self.start


_this_process: tuple[int, str, str] | None = None  # (pid, host, start), read again after a fork


def this_host() -> str:
    return _process()[1]


def _process() -> tuple[int, str, str]:
    global _this_process
    pid = os.getpid()
    if _this_process is None or _this_process[0] != pid:
        host = _host_identity()
        # Without the boot and namespace in the host, no lease of ours is ever judged by its pid.
        _this_process = (pid, host, _start_time(pid) if "/" in host else "")
    return _this_process


def holder() -> Holder:
    """The holder of the leases that this thread takes."""
    pid, host, start = _process()
    return Holder(host, pid, start, threading.get_ident())
