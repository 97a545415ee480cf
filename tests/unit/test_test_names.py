"""Every test module has a basename of its own: pytest imports test files by basename (rootdir
`prepend` mode), so a second `test_threads.py` anywhere under tests/ stops the whole suite at
collection ("import file mismatch") — as it did once, when a unit and an integration test were
both named after threads."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
