"""Schedules through the bridge's MCP server `matrix` (docs/architecture.md "MCP tools and
schedules"), end to end as in test_matrix_mcp.py (its helpers): an agent schedules a run once or
on a cron, the owner approves, lists and cancels, the bridge runs each due run once — also across
its restarts — and skips a run due while the last one still waits.

A module of its own so that a second worker can take it while another runs the tools' tests.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nio
from bridge_harness import answers_in, wait_until
from helpers import BOB, prompts, received, say
from matrix_helpers import caught_up, events_in, notices, sync_until, wait_joined
from test_matrix_mcp import ALICE, SCRIPTED_AGENT, answers, answers_of, ask, channel_with_alice, mcp_agent

from store.ids import now_ms

YEAR_AND_MORE = 400 * 86400  # seconds: past the next time a yearly cron (0 3 1 1 *) names
TWO_YEARS_AND_MORE = 800 * 86400  # past the time after that


def runs(owner, room_id: str, prompt: str) -> list[str]:
    return [n for n in notices(owner, room_id, ALICE) if n.startswith(f"⏰ alice scheduled: {prompt}")]


def approval_ask(owner, room_id: str, number: int, agent: str = "alice", user_id: str = ALICE) -> dict | None:
    """The owner's latest ask to approve `agent`'s repeating schedule `number` ({event_id, body,
    …}, its edits applied), or None before it came."""
    found = [
        m
        for m in answers_in(events_in(owner, room_id), user_id)
        if m["body"].startswith(f"🗓 {agent} asks to schedule work that repeats (schedule {number})")
    ]
    return found[-1] if found else None


async def approved(owner, room_id: str, running, number: int) -> None:
    """The ask for schedule `number` came; the owner answers it with the number 1 (approve) and
    the schedule is active."""
    await sync_until(owner, lambda: approval_ask(owner, room_id, number) is not None)
    await say(owner, room_id, "1")
    channel_id = running.store.channel_by_room(room_id).id
    await wait_until(
        lambda: [s.state for s in running.store.schedules.listed(channel_id) if s.number == number] == ["active"],
        what=f"schedule {number} is approved",
    )
    await sync_until(owner, lambda: "✅ Approved" in approval_ask(owner, room_id, number)["body"])


def framed(log: Path, text: str) -> list[str]:
    """The prompts the agent got for a scheduled run of `text`: framed, `text` on the last line."""
    return [
        p
        for p in prompts(log)
        if p.splitlines() and p.splitlines()[-1] == text and "[Scheduled run, not a message" in p
    ]


def clock_moved_on(running, seconds: float) -> None:
    """The bridge's scheduler sees the time `seconds` ahead from now on (its clock; nothing else's),
    and looks at its schedules at once: a test need not wait for real time to pass."""
    scheduler = running.bridge.scheduler
    ahead = int(seconds * 1000)
    scheduler.clock = lambda: now_ms() + ahead
    scheduler.changed()


async def test_schedule_runs_once_and_cancel_stops_one(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path)})
    room = await channel_with_alice(owner, "later")
    # an hour ahead: still listed, and the second cancelled before its time, however slow the
    # machine; then the scheduler's clock is moved on instead of waiting
    made = await ask(owner, room, '[[tool:schedule {"prompt": "time to stretch", "in_seconds": 3600}]]', "schedule")
    assert made.startswith("schedule: Scheduled as id 1"), made
    cancelled = await ask(owner, room, '[[tool:schedule {"prompt": "never said", "in_seconds": 3700}]]', "schedule")
    assert "id 2" in cancelled
    listed = await ask(owner, room, "[[tool:schedules]]", "schedules")
    assert "id 1" in listed and "time to stretch" in listed and "id 2" in listed
    gone = await ask(owner, room, '[[tool:cancel_schedule {"id": 2}]]', "cancel_schedule")
    assert gone.startswith("cancel_schedule: Cancelled schedule 2"), gone
    # a later one, as a barrier: once it has run, the cancelled one's time has long passed
    await ask(owner, room, '[[tool:schedule {"prompt": "the barrier", "in_seconds": 3800}]]', "schedule")
    assert runs(owner, room, "time to stretch") == []  # not before its time
    clock_moved_on(running, 3650)
    await sync_until(owner, lambda: "echo: time to stretch" in answers(owner, room))
    clock_moved_on(running, 3900)
    await sync_until(owner, lambda: "echo: the barrier" in answers(owner, room))
    await running.idle()
    await caught_up(owner, room)
    assert len(runs(owner, room, "time to stretch")) == 1
    assert answers(owner, room).count("echo: time to stretch") == 1
    assert runs(owner, room, "never said") == [] and "echo: never said" not in answers(owner, room)
    got = [
        m
        for m in received(log)
        if m.get("method") == "session/prompt"
        and "time to stretch" in m["params"]["prompt"][0]["text"]
        and "[[tool:" not in m["params"]["prompt"][0]["text"].splitlines()[-1]
    ]
    assert len(got) == 1
    # framed: a scheduled run of alice's schedule 1, never the owner's words; the text last
    (prompt,) = framed(log, "time to stretch")
    head = prompt.splitlines()[-2]
    assert head.startswith("[Scheduled run, not a message from the owner: schedule 1, set by alice at ")
    assert "(a single run)" in head and "alice's own words:]" in head
    # each single run was posted for the owner with the command that cancels it
    await sync_until(
        owner,
        lambda: any(
            n.startswith("🗓 alice scheduled a single run (schedule 1)")
            and n.endswith("time to stretch\n`!unschedule 1` cancels it.")
            for n in notices(owner, room, ALICE)
        ),
    )
    assert running.store.schedules.listed(running.store.channel_by_room(room).id) == []
    # the owner sees none left
    await say(owner, room, "!schedules")
    await sync_until(owner, lambda: any(n.startswith("Nothing is scheduled here") for n in notices(owner, room, ALICE)))


async def test_a_run_due_while_the_bridge_was_down_runs_once_at_the_start_saying_it_is_late(
    bridge_factory, tmp_path, owner
):
    log = tmp_path / "alice.log"
    agents = {"alice": mcp_agent(log, tmp_path)}
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder)
    room = await channel_with_alice(owner, "restart")
    made = await ask(owner, room, '[[tool:schedule {"prompt": "wake up", "in_seconds": 12}]]', "schedule")
    assert "id 1" in made
    await running.idle()
    channel_id = running.store.channel_by_room(room).id
    (schedule,) = running.store.schedules.listed(channel_id)
    await running.stop()
    await wait_until(lambda: time.time() * 1000 > schedule.due + 500, what="the run is due")
    running = await bridge_factory(agents, folder=folder)
    await sync_until(owner, lambda: "echo: wake up" in answers(owner, room))
    await running.idle()
    await caught_up(owner, room)
    (line,) = runs(owner, room, "wake up")
    assert "late: it was due at" in line
    assert answers(owner, room).count("echo: wake up") == 1
    assert running.store.schedules.listed(channel_id) == []
    # a second start takes nothing again
    await running.stop()
    running = await bridge_factory(agents, folder=folder)
    await say(owner, room, "still there?")
    await sync_until(owner, lambda: "echo: still there?" in answers(owner, room))
    await caught_up(owner, room)
    assert len(runs(owner, room, "wake up")) == 1 and answers(owner, room).count("echo: wake up") == 1


async def test_the_owner_lists_and_cancels_schedules_and_a_stranger_can_do_neither(
    homeserver, bridge_factory, tmp_path, owner, stranger
):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path)})
    response = await owner.room_create(name="shared", invite=[ALICE, homeserver.stranger_id])
    room = response.room_id
    assert isinstance(await stranger.join(room), nio.JoinResponse)
    await wait_joined(owner, room, ALICE)
    await ask(owner, room, '[[tool:schedule {"prompt": "far away", "cron": "0 3 1 1 *"}]]', "schedule")
    await ask(owner, room, '[[tool:schedule {"prompt": "also later", "in_seconds": 3600}]]', "schedule")
    await running.idle()
    await sync_until(
        owner,
        lambda: (
            approval_ask(owner, room, 1) is not None
            and any(n.startswith("🗓 alice scheduled a single run (schedule 2)") for n in notices(owner, room, ALICE))
        ),
    )
    seen = len(notices(owner, room, ALICE))
    for attempt in ("!schedules", "!unschedule 1", '[[tool:cancel_schedule {"id": 2}]]'):
        sent = await stranger.room_send(room, "m.room.message", {"msgtype": "m.text", "body": attempt})
        await running.handled(sent.event_id)
    await running.idle()
    await caught_up(owner, room)
    assert len(notices(owner, room, ALICE)) == seen  # no listing, no cancelling, for the stranger
    channel_id = running.store.channel_by_room(room).id
    assert [s.prompt for s in running.store.schedules.listed(channel_id)] == ["far away", "also later"]
    await say(owner, room, "!schedules")
    await sync_until(owner, lambda: any(n.startswith("Scheduled here:") for n in notices(owner, room, ALICE)))
    listing = next(n for n in notices(owner, room, ALICE) if n.startswith("Scheduled here:"))
    assert "1. alice, waiting for your approval, on cron 0 3 1 1 *: far away" in listing
    assert "2. alice" in listing and "also later" in listing
    await say(owner, room, "!unschedule 1")
    await sync_until(
        owner, lambda: any(n.startswith("Cancelled schedule 1 of alice: far away") for n in notices(owner, room, ALICE))
    )
    assert [s.prompt for s in running.store.schedules.listed(channel_id)] == ["also later"]
    # its ask is over: shown cancelled, and a number no longer approves it
    await sync_until(owner, lambda: "🗑 Cancelled before an answer" in approval_ask(owner, room, 1)["body"])
    await say(owner, room, "!unschedule 9")
    await sync_until(
        owner, lambda: any(n.startswith("There is no schedule 9 here") for n in notices(owner, room, ALICE))
    )


async def test_a_run_taken_by_an_earlier_run_of_the_bridge_but_not_begun_runs_once_after_the_start(
    bridge_factory, tmp_path, owner
):
    """The bridge stopped between taking a scheduled run and prompting it: the next start's
    recovery runs it (it is a turn record like any other), once; the scheduler takes it no more."""
    from store import Store

    log = tmp_path / "alice.log"
    agents = {"alice": mcp_agent(log, tmp_path)}
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder)
    room = await channel_with_alice(owner, "taken")
    await ask(owner, room, '[[tool:schedule {"prompt": "taken before the stop", "in_seconds": 3600}]]', "schedule")
    await running.idle()
    channel_id = running.store.channel_by_room(room).id
    (schedule,) = running.store.schedules.listed(channel_id)
    data_dir = running.config.data_dir
    await running.stop()
    store = Store.open("sqlite", data_dir)
    try:  # what the stopped run had done: the run taken, its turn not begun
        assert store.schedules.fire(schedule.id, schedule.due, None, "an-earlier-run") is not None
    finally:
        store.close()
    running = await bridge_factory(agents, folder=folder)
    await sync_until(owner, lambda: "echo: taken before the stop" in answers(owner, room))
    await running.idle()
    await caught_up(owner, room)
    assert len(runs(owner, room, "taken before the stop")) == 1
    assert answers(owner, room).count("echo: taken before the stop") == 1
    assert running.store.schedules.listed(channel_id) == []
    assert running.bridge.scheduler.fired == 0


async def test_a_run_whose_agent_left_the_room_is_dropped_and_its_schedule_cancelled(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path)})
    room = await channel_with_alice(owner, "kicked")
    await ask(owner, room, '[[tool:schedule {"prompt": "after the kick", "cron": "0 3 1 1 *"}]]', "schedule")
    await approved(owner, room, running, 1)
    await running.idle()
    store = running.store
    channel_id = store.channel_by_room(room).id
    assert isinstance(await owner.room_kick(room, ALICE), nio.RoomKickResponse)
    await wait_until(lambda: store.member(channel_id, "alice") is None, what="alice is no member")
    clock_moved_on(running, YEAR_AND_MORE)  # past its next time (no waiting for it)
    await wait_until(
        lambda: store.schedules.listed(channel_id) == [], timeout=60, what="the schedule is cancelled at its first run"
    )
    await running.idle()
    await caught_up(owner, room)
    assert runs(owner, room, "after the kick") == []
    members = [e for e in events_in(owner, room) if e.get("type") == "m.room.member" and e.get("state_key") == ALICE]
    assert members[-1]["content"]["membership"] == "leave"  # not invited back


def turns_of(store, schedule_id: str) -> list:
    """The turns of a schedule's runs not over yet."""
    return [t for t in store.turns.unfinished() if t.prompt_event.startswith(f"schedule:{schedule_id}:")]


async def test_a_cron_runs_only_once_the_owner_approved_it_and_a_declined_one_never(bridge_factory, tmp_path, owner):
    """An agent's repeating schedule is the owner's decision: asked in the room (a number, a
    keycap), it does not run before; approved, it runs, framed; declined, never — and the agent
    hears so from `schedules`."""
    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path)})
    store = running.store
    room = await channel_with_alice(owner, "approvals")
    made = await ask(owner, room, '[[tool:schedule {"prompt": "yearly check", "cron": "0 3 1 1 *"}]]', "schedule")
    channel_id = store.channel_by_room(room).id
    assert made.startswith("schedule: Schedule id 1 (on cron 0 3 1 1 *) waits for the owner's approval"), made
    await sync_until(owner, lambda: approval_ask(owner, room, 1) is not None)
    assert "1. ✅ Approve" in approval_ask(owner, room, 1)["body"]
    # not before the approval: a single run due later than its time runs, and it does not
    await ask(owner, room, '[[tool:schedule {"prompt": "the barrier", "in_seconds": 3600}]]', "schedule")
    clock_moved_on(running, YEAR_AND_MORE)
    await sync_until(owner, lambda: "echo: the barrier" in answers(owner, room))
    assert "echo: yearly check" not in answers(owner, room) and framed(log, "yearly check") == []
    listed = await ask(owner, room, "[[tool:schedules]]", "schedules")
    assert "id 1 (waiting for the owner's approval" in listed, listed
    # approved with the number: active from the next time its cron names
    await approved(owner, room, running, 1)
    # another one (the barrier was 2), declined with the keycap 2
    await ask(owner, room, '[[tool:schedule {"prompt": "never wanted", "cron": "0 4 1 1 *"}]]', "schedule")
    await sync_until(owner, lambda: approval_ask(owner, room, 3) is not None)
    await owner.room_send(
        room,
        "m.reaction",
        {
            "m.relates_to": {
                "rel_type": "m.annotation",
                "event_id": approval_ask(owner, room, 3)["event_id"],
                "key": "2️⃣",
            }
        },
    )
    await sync_until(owner, lambda: "❌ Declined" in approval_ask(owner, room, 3)["body"])
    listed = await ask(owner, room, "[[tool:schedules]]", "schedules")
    assert "id 3 (declined by the owner" in listed and "id 1 (next at" in listed, listed
    assert "id 3" not in await ask(owner, room, "[[tool:schedules]]", "schedules")  # said once
    # both times come: the approved one runs, framed; the declined one never
    clock_moved_on(running, TWO_YEARS_AND_MORE)
    await sync_until(owner, lambda: "echo: yearly check" in answers(owner, room))
    await ask(owner, room, "still there?", "echo: still there?")  # after any run that was queued
    (prompt,) = framed(log, "yearly check")
    head = prompt.splitlines()[-2]
    assert "schedule 1, set by alice at" in head and "(repeating on cron 0 3 1 1 *, approved by the owner at" in head
    assert "echo: never wanted" not in answers(owner, room) and framed(log, "never wanted") == []
    assert [s.number for s in store.schedules.listed(channel_id)] == [1]
    await running.idle()


async def test_an_agent_sees_and_cancels_only_its_own_schedules(bridge_factory, tmp_path, owner):
    alice_log, bob_log = tmp_path / "alice.log", tmp_path / "bob.log"
    running = await bridge_factory(
        {"alice": mcp_agent(alice_log, tmp_path), "bob": {**mcp_agent(bob_log, tmp_path), "title": "Bob"}}
    )
    response = await owner.room_create(name="two agents", invite=[ALICE, BOB])
    room = response.room_id
    await wait_joined(owner, room, ALICE, BOB)
    await say(owner, room, '@alice [[tool:schedule {"prompt": "alice alone", "in_seconds": 3600}]]')
    await sync_until(owner, lambda: any(a.startswith("schedule: Scheduled as id 1") for a in answers(owner, room)))
    await say(owner, room, "@bob [[tool:schedules]]")
    await sync_until(owner, lambda: any(a.startswith("schedules") for a in answers_of(owner, room, BOB)))
    assert "schedules: You have nothing scheduled in this conversation." in answers_of(owner, room, BOB)
    await say(owner, room, '@bob [[tool:cancel_schedule {"id": 1}]]')
    await sync_until(owner, lambda: any(a.startswith("cancel_schedule") for a in answers_of(owner, room, BOB)))
    refused = next(a for a in answers_of(owner, room, BOB) if a.startswith("cancel_schedule"))
    assert refused == (
        "cancel_schedule error: schedule 1 is another agent's: you see and cancel only your own (see `schedules`)"
    ), refused
    channel_id = running.store.channel_by_room(room).id
    assert [(s.agent, s.prompt) for s in running.store.schedules.listed(channel_id)] == [("alice", "alice alone")]
    await running.idle()


async def test_a_run_due_while_its_last_one_waits_is_skipped_and_unschedule_drops_the_waiting_one(
    bridge_factory, tmp_path, owner
):
    """Behind a slow turn, a repeating schedule's runs do not pile up: its second time comes
    while the first run waits, and is skipped; `!unschedule` drops the run still waiting."""
    log, hold = tmp_path / "alice.log", tmp_path / "bob may end"
    bob = {"command": [sys.executable, str(SCRIPTED_AGENT), "--hold", str(hold)], "title": "Bob"}
    running = await bridge_factory({"alice": mcp_agent(log, tmp_path), "bob": bob})
    store, scheduler = running.store, running.bridge.scheduler
    response = await owner.room_create(name="slow", invite=[ALICE, BOB])
    room = response.room_id
    await wait_joined(owner, room, ALICE, BOB)
    await say(owner, room, '@alice [[tool:schedule {"prompt": "every year", "cron": "0 3 1 1 *"}]]')
    await approved(owner, room, running, 1)
    channel_id = store.channel_by_room(room).id
    (schedule,) = store.schedules.listed(channel_id)
    # bob's answer holds the conversation's line: the run queues behind it
    await say(owner, room, "@bob take your time")
    await sync_until(owner, lambda: answers_in(events_in(owner, room), BOB) != [])
    clock_moved_on(running, YEAR_AND_MORE)
    await wait_until(lambda: len(turns_of(store, schedule.id)) == 1, what="the first run is queued")
    clock_moved_on(running, TWO_YEARS_AND_MORE)
    await wait_until(lambda: scheduler.skipped == 1, what="the second run is skipped")
    assert len(turns_of(store, schedule.id)) == 1  # not queued a second time
    assert store.schedules.get(schedule.id).due > now_ms() + YEAR_AND_MORE * 1000  # moved on
    # the owner cancels it: its run still waiting is dropped with it
    await say(owner, room, "!unschedule 1")
    await sync_until(
        owner,
        lambda: any(
            e.get("type") == "m.room.message"
            and e["content"]
            .get("body", "")
            .startswith("Cancelled schedule 1 of alice: every year (1 queued run dropped)")
            for e in events_in(owner, room)
        ),
    )
    assert turns_of(store, schedule.id) == []
    hold.touch()  # bob ends; the line goes on
    await say(owner, room, "@alice still there?")
    await sync_until(owner, lambda: any(a.startswith("echo:") and "still there?" in a for a in answers(owner, room)))
    await running.idle()
    assert "echo: every year" not in answers(owner, room) and framed(log, "every year") == []


async def test_a_waiting_cron_is_asked_again_after_a_restart_and_its_approval_is_kept(bridge_factory, tmp_path, owner):
    log = tmp_path / "alice.log"
    agents = {"alice": mcp_agent(log, tmp_path)}
    folder = tmp_path / "bridge"
    running = await bridge_factory(agents, folder=folder)
    room = await channel_with_alice(owner, "kept")

    def asks() -> list[dict]:
        return [
            m
            for m in answers_in(events_in(owner, room), ALICE)
            if m["body"].startswith("🗓 alice asks to schedule work that repeats (schedule 1)")
        ]

    await ask(owner, room, '[[tool:schedule {"prompt": "after restarts", "cron": "0 3 1 1 *"}]]', "schedule")
    await sync_until(owner, lambda: len(asks()) == 1)
    await running.idle()
    await running.stop()
    # the stop ended the open ask, saying so; the next start asks again
    await sync_until(owner, lambda: "⏹ Not answered before the bridge stopped" in asks()[0]["body"])
    running = await bridge_factory(agents, folder=folder)
    await sync_until(owner, lambda: len(asks()) == 2)
    await approved(owner, room, running, 1)  # "1" answers the open ask, the new one
    await running.stop()
    running = await bridge_factory(agents, folder=folder)
    channel_id = running.store.channel_by_room(room).id
    (schedule,) = running.store.schedules.listed(channel_id)
    assert schedule.state == "active" and schedule.approved is not None  # kept: not asked again
    clock_moved_on(running, TWO_YEARS_AND_MORE)
    await sync_until(owner, lambda: "echo: after restarts" in answers(owner, room))
    await running.idle()
    await caught_up(owner, room)
    assert len(asks()) == 2 and len(framed(log, "after restarts")) == 1
