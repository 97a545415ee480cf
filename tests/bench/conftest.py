"""tests/bench holds benchmarks, not tests: pytest must never collect them.

Run them with `python -m tests.bench.run` (see run.py).
"""

collect_ignore_glob = ["*"]
