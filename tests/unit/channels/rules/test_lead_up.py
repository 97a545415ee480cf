"""A thread's fresh session is told what led to its root (docs/using.md "Threads")."""

from __future__ import annotations

from dataclasses import dataclass

from bridge.channels.rules.lead_up import with_lead_up


@dataclass(frozen=True)
class Line:
    id: str


def ids(lines: list[Line]) -> list[str]:
    return [line.id for line in lines]


def test_the_main_timeline_up_to_the_root_comes_first_and_the_root_once():
    lead = [Line("1"), Line("2"), Line("3")]  # "3" is the root
    thread = [Line("3"), Line("5"), Line("7")]
    assert ids(with_lead_up(lead, thread, 20)) == ["1", "2", "3", "5", "7"]


def test_the_limit_keeps_the_newest():
    lead = [Line(str(n)) for n in range(10)]
    thread = [Line("9"), Line("a"), Line("b")]
    assert ids(with_lead_up(lead, thread, 4)) == ["8", "9", "a", "b"]
    assert with_lead_up(lead, thread, 0) == []


def test_no_lead_up_leaves_the_thread_as_it_was():
    thread = [Line("3"), Line("5")]
    assert ids(with_lead_up([], thread, 20)) == ["3", "5"]
