"""One side's run of parts 2 and 3 for an A/B pair (``benchmarks/ab.py``), in a process of its own.

    python -m benchmarks.ab_inproc --out run.json [--quick]

The measurements are ``inproc.py``'s (part 1's INSERT + COMMIT beside them, as the ratios' reference),
one run each after the same warm-up: a pair is one such process of HEAD's and one of the base's, back to
back, so each ratio compares runs made moments apart. DBOS is left out: it is the same on both sides.
The statements and commits of one 3-step create() are counted too (``benchmarks/statements.py``).
"""

from __future__ import annotations

import argparse

from benchmarks import statements
from benchmarks.common import log, write_json
from benchmarks.inproc import (
    clean,
    connection,
    ours_three,
    public_step_overhead,
    step_overhead,
    warm_up,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    inserts, three = (300, 30) if args.quick else (3000, 300)
    clean()
    limit, floor = warm_up()

    floor_us = 1e6 / floor.run(inserts)
    limit_us = 1e6 / limit.run(inserts)
    floor.close()
    step_us = step_overhead(1000)
    public_us = public_step_overhead(1000)
    three_rate = ours_three(three)
    counted = statements.count(lambda: ours_three(1))
    result = {"backend": connection.vendor, "floor_us": floor_us, "limit_us": limit_us, "step_us": step_us,
              "step_ratio": step_us / limit_us, "public_us": public_us, "public_ratio": public_us / floor_us,
              "three_rate": three_rate, "three_statements": counted["statements"],
              "three_commits": counted["commits"], "three_by_verb": counted["by_verb"]}
    log(f"  {connection.vendor}: step {step_us:.0f} us by replay(), {public_us:.0f} us by create(); "
        f"{three_rate:.0f} 3-step workflows/s; one: "
        f"{counted['statements']} statements ({counted['by_verb']}), {counted['commits']} commits")
    clean()
    write_json(args.out, result)


if __name__ == "__main__":
    main()
