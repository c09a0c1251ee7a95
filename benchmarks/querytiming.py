"""Print the statements that took the most time, from a BENCH_QUERY_TIMING=1 query log directory
(``python -m benchmarks.querytiming DIR``)."""

import json
import sys
from collections import defaultdict
from pathlib import Path


def main():
    totals = defaultdict(lambda: [0, 0.0])
    for path in Path(sys.argv[1]).glob("*.json"):
        for sql, (count, seconds) in json.loads(path.read_text()).get("timing", {}).items():
            totals[sql][0] += count
            totals[sql][1] += seconds
    grand = sum(v[1] for v in totals.values())
    print(f"{grand:.2f} s in {sum(v[0] for v in totals.values())} statements")
    for sql, (count, seconds) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{seconds:7.2f} s {count:6d} x {seconds / count * 1e3:6.2f} ms  {sql[:120]}")


if __name__ == "__main__":
    main()
