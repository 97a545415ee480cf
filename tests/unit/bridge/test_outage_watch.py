"""The database outage's watch (bridge/outage.py): which rooms are told, and when."""

from __future__ import annotations

import asyncio

import pytest

from bridge import outage
from bridge.outage import BACK_TEXT, DOWN_TEXT, StoreOutage
from store import StoreUnavailable


class Target:
    """The store as the watch sees it: down until `up` is set."""

    def __init__(self):
        self.up = False

    def available(self) -> bool:
        return self.up

    def set_value(self, key, value) -> None:
        pass


class Db:
    def __init__(self):
        self.target = Target()

    async def run(self, fn):
        return fn()

    async def retry_in(self) -> float:
        return 0.0


class Recorded(StoreOutage):
    def __init__(self):
        super().__init__(db=Db())
        self.said: list[tuple[str, list[str]]] = []

    async def _say(self, text: str, rooms: list[str]) -> None:
        if rooms:
            self.said.append((text, list(rooms)))


async def until(condition, what: str) -> None:
    try:
        async with asyncio.timeout(10):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not {what} after 10 s") from None


async def test_a_room_whose_message_comes_after_the_notice_is_told_too_and_each_once(monkeypatch):
    monkeypatch.setattr(outage, "DOWN_NOTICE_AFTER", 0.0)
    watch = Recorded()
    down = StoreUnavailable("gone")
    watch.hit(down, {})  # a turn's write found it down: no room waits yet
    await until(lambda: watch._task is not None and watch._task.done() is False, "watching")
    watch.hit(down, {"room_id": "!a"})
    await until(lambda: watch.said == [(DOWN_TEXT, ["!a"])], "!a told")
    watch.hit(down, {"room_id": "!b"})  # after the first notice
    watch.hit(down, {"room_id": "!a"})  # again: not told twice
    await until(lambda: len(watch.said) == 2, "!b told")
    assert watch.said[1] == (DOWN_TEXT, ["!b"])
    watch.db.target.up = True
    await until(lambda: watch._task.done(), "back")
    assert watch.said[2:] == [(BACK_TEXT, ["!a", "!b"])]
    assert watch.outages == 1


@pytest.mark.parametrize("rooms", [[], ["!a"]])
async def test_an_outage_shorter_than_the_notice_delay_says_nothing(monkeypatch, rooms):
    monkeypatch.setattr(outage, "DOWN_NOTICE_AFTER", 60.0)
    watch = Recorded()
    for room_id in rooms or [None]:
        watch.hit(StoreUnavailable("gone"), {"room_id": room_id} if room_id else {})
    watch.db.target.up = True
    await until(lambda: watch._task.done(), "back")
    assert watch.said == []
