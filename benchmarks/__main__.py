import sys

from benchmarks.driver import main

sys.exit(main())
