"""The appservice sender killed right after the owner's message was written, on Synapse with
workers (docs/outages.md "A message the sender never hands on").

The sender is frozen (SIGSTOP) while the owner writes in a DM where a conversation is going on,
killed -9 right after the send returned, and started again. The new sender sends that message
only when a later event wakes it, and none comes: the bridge finds it itself, reading back its
active rooms once the homeserver has been quiet (bridge/matrix/quiet.py), and answers it once.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from bridge_harness import answers_in
from helpers import ALICE, open_dm, prompts, say, two_echo_agents
from invariants import edits_after_final
from matrix_helpers import caught_up, events_in, record_figures, sync_until
from synapse_workers import SENDER

from bridge.matrix.quiet import QUIET

pytestmark = pytest.mark.scale

# the bound docs/outages.md states is QUIET and a read; the wait leaves a loaded machine room
WAIT = QUIET + 50


async def test_a_message_the_killed_sender_never_hands_on_is_found_without_a_later_event(
    homeserver, bridge_factory, owner, tmp_path
):
    workers = homeserver.workers
    running, logs = await two_echo_agents(bridge_factory, tmp_path)
    room_id = await open_dm(owner, ALICE)
    await say(owner, room_id, "first")
    await sync_until(
        owner, lambda: [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)] == ["echo: first"]
    )
    await running.idle()
    await caught_up(owner, room_id)
    os.killpg(workers.pid(SENDER), signal.SIGSTOP)  # frozen: it takes nothing from the stream
    try:
        second = await say(owner, room_id, "second")
        sent = time.monotonic()
    finally:
        workers.kill(SENDER)  # SIGKILL ends it, frozen or not
    assert not workers.taken_for_appservices(second)  # the sender never took it
    await workers.start_process(SENDER)
    # nothing else happens on the homeserver: no later event wakes the new sender
    await sync_until(
        owner,
        lambda: [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)] == ["echo: first", "echo: second"],
        timeout=WAIT,
    )
    record_figures("sender killed after a write", {"answered after (s)": round(time.monotonic() - sent, 1)})
    await running.idle()
    await caught_up(owner, room_id)
    assert prompts(logs[ALICE]) == ["first", "second"], prompts(logs[ALICE])
    assert [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)] == ["echo: first", "echo: second"]
    assert edits_after_final(events_in(owner, room_id), ALICE) == []
    stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
    assert [m.text for m in stored if m.role == "user"] == ["first", "second"]
