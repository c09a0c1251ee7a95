"""Summarise a ``py-spy record --format raw --subprocesses`` file: samples by process role and by
hot function (``python -m benchmarks.pyspy_summary FILE [FUNCTION ...]``)."""

from __future__ import annotations

import collections
import sys

ROLES = ("pusher", "worker", "monitor", "guard", "Worker.run", "scheduler")


def parse(path):
    for line in open(path):
        stack, _, count = line.rstrip().rpartition(" ")
        if stack:
            yield stack.split(";"), int(count)


def role(frames) -> str:
    names = [f.split(" (")[0] for f in frames if not f.startswith("process ")]
    for name in names[::-1]:
        if name in ROLES:
            return {"Worker.run": "workflows_worker loop"}.get(name, f"django-q2 {name}")
    return names[-1] if names else "?"


def summarise(path, functions=()):
    total = 0
    by_role: collections.Counter = collections.Counter()
    inclusive: dict[str, collections.Counter] = {f: collections.Counter() for f in functions}
    leaves: collections.Counter = collections.Counter()
    for frames, count in parse(path):
        total += count
        r = role(frames)
        by_role[r] += count
        leaves[frames[-1].split(" (")[0] + " (" + frames[-1].split(" (")[-1]] += count
        for f in functions:
            if any(f in fr for fr in frames):
                inclusive[f][r] += count
    return total, by_role, inclusive, leaves


def main():
    path, functions = sys.argv[1], sys.argv[2:] or ["ensure_connection", "close_old_connections", "_connect_gen"]
    total, by_role, inclusive, leaves = summarise(path, functions)
    print(f"{total} samples")
    for r, n in by_role.most_common(10):
        print(f"  {n / total:6.1%}  {r}")
    for f, counter in inclusive.items():
        n = sum(counter.values())
        print(f"{f}: {n / total:.1%} of samples: " + ", ".join(f"{r} {c / total:.1%}" for r, c in counter.most_common(5)))
    print("leaf functions:")
    for leaf, n in leaves.most_common(12):
        print(f"  {n / total:6.1%}  {leaf}")


if __name__ == "__main__":
    main()
