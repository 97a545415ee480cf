"""A channel's switches, `!threads` and `!approve`: one piece reads the arguments, tells the
setting, stores the choice (the default: nothing kept) — bridge/channels/commands/commands.py."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest

from bridge.channels.commands.commands import BotCommands, _kept_if
from bridge.channels.rules.approvals import ANY_OWNER, approve_mode, approve_state, approve_switch
from bridge.channels.rules.command_parse import THREADS_ON, opens_threads, threads_state, threads_switch


class Values:
    """The key-value store's three calls, in memory."""

    def __init__(self):
        self.values: dict[str, str] = {}

    async def get_value(self, key):
        return self.values.get(key)

    async def set_value(self, key, value):
        self.values[key] = value

    async def delete_value(self, key):
        self.values.pop(key, None)


THREADS = (threads_switch, opens_threads, partial(_kept_if, THREADS_ON, True), threads_state)
APPROVE = (approve_switch, approve_mode, partial(_kept_if, ANY_OWNER, ANY_OWNER), approve_state)


async def switch(values: Values, rules, *args: str) -> list[str]:
    said: list[str] = []

    async def say(text: str) -> None:
        said.append(text)

    await BotCommands._switch(SimpleNamespace(db=values), "k", args, say, *rules)  # type: ignore[arg-type]
    return said


@pytest.mark.parametrize(
    ("rules", "on", "stored", "off", "told_on", "told_off"),
    [
        (THREADS, "on", THREADS_ON, "off", threads_state(True), threads_state(False)),
        (APPROVE, "any", ANY_OWNER, "requester", approve_state(ANY_OWNER), approve_state("requester")),
    ],
)
async def test_a_switch_stores_its_choice_and_the_default_as_nothing(rules, on, stored, off, told_on, told_off):
    values = Values()
    assert await switch(values, rules) == [told_off]  # nothing stored: the default, told
    assert await switch(values, rules, on) == [told_on] and values.values == {"k": stored}
    assert await switch(values, rules) == [told_on]
    assert await switch(values, rules, off) == [told_off] and values.values == {}


@pytest.mark.parametrize("rules", [THREADS, APPROVE])
async def test_a_wrong_argument_is_one_usage_line_and_changes_nothing(rules):
    values = Values()
    await switch(values, rules, "on" if rules is THREADS else "any")
    before = dict(values.values)
    said = await switch(values, rules, "sideways")
    assert len(said) == 1 and "!" in said[0]  # the usage line names the command
    assert values.values == before
