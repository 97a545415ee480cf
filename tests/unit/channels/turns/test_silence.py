"""bridge/channels/turns/silence.py: the status of an agent silent for a while (pure decisions, and
the watch against a stand-in answer)."""

from __future__ import annotations

from functools import partial

from bridge_harness import wait_until

from bridge.channels.turns import silence
from bridge.channels.turns.silence import SilenceWatch, silent_status, step


def test_the_line_says_how_long_and_how_to_stop():
    assert silent_status(30) == "⏳ still working, nothing received for 30 s — `!stop` to cancel"
    assert silence.duration(90) == "90 s" and silence.duration(120) == "2 min"
    assert silence.duration(150) == "2 min" and silence.duration(0.5) == "0.5 s"
    assert silence.SILENT_AFTER == 30


def test_the_line_is_due_each_interval_of_silence():
    assert step(now=29.9, last_heard=0, said=0, after=30) is None
    assert step(now=30, last_heard=0, said=0, after=30) == silent_status(30)
    assert step(now=45, last_heard=0, said=1, after=30) is None  # said once: next at 60 s
    assert step(now=61, last_heard=0, said=1, after=30) == silent_status(60)
    assert step(now=100, last_heard=90, said=0, after=30) is None  # heard from at 90 s


class Answer:
    def __init__(self, status):
        self.status, self.shown = status, []

    def set_status(self, status):
        self.status = status
        self.shown.append(status)


until = partial(wait_until, timeout=10.0, every=0.01)


async def test_the_watch_says_it_and_puts_the_status_back_when_the_agent_speaks():
    answer = Answer("💭 thinking…")
    watch = SilenceWatch(answer, after=0.05)
    watch.start()
    try:
        await until(lambda: answer.status == silent_status(0.05))
        watch.heard()
        assert answer.status == "💭 thinking…"
        await until(lambda: answer.shown.count(silent_status(0.05)) == 2)  # silent again
    finally:
        watch.stop()


async def test_not_while_a_person_is_asked():
    answer = Answer("🔧 using a tool: write")
    asked = []

    def asking() -> bool:
        asked.append(True)
        return True

    watch = SilenceWatch(answer, asking, after=0.02)
    watch.start()
    try:
        await until(lambda: len(asked) >= 3)  # it looked three times, a person was deciding each
        assert answer.shown == [] and watch.said == 0
    finally:
        watch.stop()
