"""Agents that hand work to each other (docs/sessions.md "Agents that hand work to each other"),
end to end: a real Synapse, the real bridge, the owner's matrix-nio client and scripted agents
(tests/agents/mcp_agent.py) calling the `handoff` tool of the bridge's MCP server. `[[relay:…]]`
makes each agent hand on to the next name; `--forever-to` makes two agents hand to each other
forever; `[[then-wait:FILE]]` keeps a turn running after its hand-off until the test says.
"""

from __future__ import annotations

from pathlib import Path

from bridge_harness import answers_in, wait_until
from helpers import BOB, in_thread, prompts, received, say, thread_of
from matrix_helpers import caught_up, events_in, notice_events, notices, sync_until, wait_joined
from test_matrix_mcp import ALICE, answers_of, mcp_agent

FRAME = "[alice handed this conversation to you; alice's request follows"


def agents(tmp_path: Path, **extra) -> tuple[dict, dict[str, Path]]:
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    made = {
        "alice": mcp_agent(logs["alice"], tmp_path, *extra.pop("alice", ())),
        "bob": {**mcp_agent(logs["bob"], tmp_path, *extra.pop("bob", ())), "title": "Bob"},
    }
    return made, logs


async def two_agents_room(owner, name: str) -> str:
    response = await owner.room_create(name=name, invite=[ALICE, BOB])
    await wait_joined(owner, response.room_id, ALICE, BOB)
    return response.room_id


def handoff_lines(owner, room_id: str) -> list[str]:
    return [n for n in notices(owner, room_id) if n.startswith("↪")]


def tool_results(log: Path) -> list[dict]:
    return [m for m in received(log) if m.get("tool") == "handoff"]


async def test_alice_hands_to_bob_who_answers_next_told_the_request_and_alice_answer(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path)
    running = await bridge_factory(made)
    room = await two_agents_room(owner, "hand")
    await say(owner, room, '@alice [[tool:handoff {"agent": "bob", "request": "review the plan"}]]')
    await sync_until(owner, lambda: "echo: review the plan" in answers_of(owner, room, BOB))
    await running.idle()
    await caught_up(owner, room)
    (handed,) = answers_of(owner, room, ALICE)
    assert handed.startswith("handoff: Handed to bob"), handed
    (prompt,) = prompts(logs["bob"])  # bob answered once: the handed turn
    lines = prompt.splitlines()
    assert lines[-1] == "review the plan" and lines[-2].startswith(FRAME) and lines[-2].endswith("]")
    assert f"alice: {handed}" in lines  # what alice answered, as the messages bob had not seen
    # the room: who handed what to whom, from alice's puppet, before bob's answer; mentioning nobody
    (line,) = [e for e in notice_events(owner, room, ALICE) if e["content"]["body"].startswith("↪")]
    assert line["content"]["body"] == "↪ alice → bob: review the plan"
    assert line["content"]["m.mentions"] == {}
    order = [e["event_id"] for e in events_in(owner, room)]
    bob_answer = next(
        e for e in events_in(owner, room) if e.get("sender") == BOB and e["content"].get("msgtype") == "m.text"
    )
    assert order.index(line["event_id"]) < order.index(bob_answer["event_id"])


async def test_a_chain_of_four_stops_at_three_with_one_line(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path)
    running = await bridge_factory(made)
    room = await two_agents_room(owner, "chain")
    await say(owner, room, "@alice [[relay:bob alice bob alice]]")
    await sync_until(owner, lambda: any(a.startswith("handoff error:") for a in answers_of(owner, room, BOB)))
    await running.idle()
    await caught_up(owner, room)
    refused = next(a for a in answers_of(owner, room, BOB) if a.startswith("handoff error:"))
    assert "at most 3 hand-offs" in refused and "limits.handoffs" in refused, refused
    # three handed turns: bob, alice, bob; the fourth hand-off made none
    assert len(prompts(logs["alice"])) == 2 and len(prompts(logs["bob"])) == 2
    assert handoff_lines(owner, room) == [
        "↪ alice → bob: [[relay:alice bob alice]]",
        "↪ bob → alice: [[relay:bob alice]]",
        "↪ alice → bob: [[relay:alice]]",
        "↪ bob → alice not handed: at most 3 hand-offs follow one message here (limits.handoffs); the chain ends.",
    ]


async def test_two_agents_handing_to_each_other_forever_make_exactly_the_limit(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path, alice=("--forever-to", "bob"), bob=("--forever-to", "alice"))
    running = await bridge_factory(made, limits={"handoffs": 2})
    room = await two_agents_room(owner, "forever")
    await say(owner, room, "@alice [[forever]]")
    await sync_until(owner, lambda: any("not handed" in line for line in handoff_lines(owner, room)))
    await running.idle()
    await caught_up(owner, room)
    # the owner's turn (alice), then exactly two handed turns (bob, alice)
    assert len(prompts(logs["alice"])) == 2 and len(prompts(logs["bob"])) == 1
    assert [m["error"] for m in tool_results(logs["alice"]) + tool_results(logs["bob"])].count(True) == 1
    assert len([line for line in handoff_lines(owner, room) if "not handed" in line]) == 1


async def test_self_a_non_member_and_handoffs_off_are_refused(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path)
    made["carol"] = mcp_agent(tmp_path / "carol.log", tmp_path)  # configured, not in the room
    running = await bridge_factory(made)
    room = await two_agents_room(owner, "refusals")

    async def handoff(target: str) -> str:
        before = len(answers_of(owner, room, ALICE))
        await say(owner, room, f'@alice [[tool:handoff {{"agent": "{target}", "request": "x"}}]]')
        await sync_until(owner, lambda: len(answers_of(owner, room, ALICE)) > before)
        return answers_of(owner, room, ALICE)[-1]

    assert "cannot hand this to yourself" in await handoff("alice")
    assert "carol is not a member of this channel" in await handoff("carol")
    await say(owner, room, "!handoffs off")
    await sync_until(owner, lambda: any(n.startswith("Hand-offs are off here") for n in notices(owner, room)))
    assert "!handoffs off" in await handoff("bob")
    await running.idle()
    assert prompts(logs["bob"]) == [] and handoff_lines(owner, room) == []
    assert not (tmp_path / "carol.log").exists()
    await say(owner, room, "!handoffs on")
    await sync_until(owner, lambda: any(n.startswith("Hand-offs are on here") for n in notices(owner, room)))
    assert (await handoff("bob")).startswith("handoff: Handed to bob")
    await sync_until(owner, lambda: "echo: x" in answers_of(owner, room, BOB))


async def test_stop_mid_chain_ends_the_turn_and_the_chain(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path)
    running = await bridge_factory(made)
    room = await two_agents_room(owner, "stop")
    never = tmp_path / "never"
    await say(owner, room, f'@alice [[tool:handoff {{"agent": "bob", "request": "never"}}]] [[then-wait:{never}]]')
    await wait_until(lambda: tool_results(logs["alice"]), what="alice handed to bob")
    await say(owner, room, "!stop")
    await wait_until(lambda: any(m.get("method") == "session/cancel" for m in received(logs["alice"])))
    await running.idle()
    await caught_up(owner, room)
    assert prompts(logs["bob"]) == [] and handoff_lines(owner, room) == []


async def test_an_owner_message_during_a_chain_goes_first_and_ends_it(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path)
    running = await bridge_factory(made)
    room = await two_agents_room(owner, "owner first")
    go = tmp_path / "go"
    await say(owner, room, f'@alice [[tool:handoff {{"agent": "bob", "request": "later"}}]] [[then-wait:{go}]]')
    await wait_until(lambda: tool_results(logs["alice"]), what="alice handed to bob")
    second = await say(owner, room, "@alice the owner again")
    await running.handled(second)
    go.touch()
    await sync_until(owner, lambda: "echo: @alice the owner again" in answers_of(owner, room, ALICE))
    await running.idle()
    await caught_up(owner, room)
    assert prompts(logs["bob"]) == [] and handoff_lines(owner, room) == []


async def test_a_budget_reached_mid_chain_stops_it(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path)
    made["alice"]["budget"] = {"cost": 1.0, "per": "day"}
    running = await bridge_factory(made)
    room = await two_agents_room(owner, "budget")
    # alice hands to bob, then her report passes her cap: her turn is cancelled, the chain ends
    handing = '[[tool:handoff {"agent": "bob", "request": "too late"}]]'
    await say(owner, room, f"@alice {handing} [[cost:1.5]] [[then-wait:{tmp_path / 'never'}]]")
    await sync_until(owner, lambda: any("reached its budget" in a for a in answers_of(owner, room, ALICE)))
    await running.idle()
    assert tool_results(logs["alice"])[0]["error"] is False  # the hand-off had been made
    assert prompts(logs["bob"]) == []
    # bob hands to alice, over her budget: her handed turn gets the budget's one line, unasked
    await say(owner, room, "@bob [[relay:alice bob]]")
    await sync_until(
        owner, lambda: any(a.startswith("⛔ Alice has spent its budget") for a in answers_of(owner, room, ALICE))
    )
    await running.idle()
    await caught_up(owner, room)
    assert len(prompts(logs["alice"])) == 1 and len(prompts(logs["bob"])) == 1
    assert handoff_lines(owner, room) == ["↪ bob → alice: [[relay:bob]]"]


async def test_a_handoff_in_a_thread_is_answered_in_the_thread(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path)
    running = await bridge_factory(made)
    room = await two_agents_room(owner, "threads")
    root = await say(owner, room, "@alice the root")
    await sync_until(owner, lambda: "echo: @alice the root" in answers_of(owner, room, ALICE))
    await say(
        owner,
        room,
        '@alice [[tool:handoff {"agent": "bob", "request": "in the thread"}]]',
        **in_thread(root, root),
    )
    await sync_until(owner, lambda: "echo: in the thread" in answers_of(owner, room, BOB))
    await running.idle()
    await caught_up(owner, room)
    events = events_in(owner, room)
    (final,) = [a for a in answers_in(events, BOB) if a["body"] == "echo: in the thread"]
    answer = next(e for e in events if e["event_id"] == final["event_id"])
    line = next(e for e in events if e["content"].get("body", "").startswith("↪ alice → bob"))
    assert thread_of(answer) == root and thread_of(line) == root
    (prompt,) = prompts(logs["bob"])
    assert "the root" in prompt and prompt.splitlines()[-2].startswith(FRAME)


async def test_a_pending_handoff_survives_a_restart_and_runs_once(bridge_factory, tmp_path, owner):
    made, logs = agents(tmp_path)
    folder = tmp_path / "bridge"
    running = await bridge_factory(made, folder=folder)
    room = await two_agents_room(owner, "restart")
    never = tmp_path / "never"
    await say(
        owner, room, f'@alice [[tool:handoff {{"agent": "bob", "request": "after the restart"}}]] [[then-wait:{never}]]'
    )
    await wait_until(lambda: tool_results(logs["alice"]), what="alice handed to bob")
    await running.stop()  # alice's turn is cut; bob's, taken, has not begun
    assert prompts(logs["bob"]) == []
    running = await bridge_factory(made, folder=folder)
    await sync_until(owner, lambda: "echo: after the restart" in answers_of(owner, room, BOB))
    await running.idle()
    await running.stop()
    running = await bridge_factory(made, folder=folder)  # a second start runs nothing again
    await say(owner, room, "@bob still there?")
    await sync_until(owner, lambda: "echo: @bob still there?" in answers_of(owner, room, BOB))
    await running.idle()
    await caught_up(owner, room)
    assert answers_of(owner, room, BOB).count("echo: after the restart") == 1
    assert handoff_lines(owner, room) == ["↪ alice → bob: after the restart"]
    assert [p.splitlines()[-1] for p in prompts(logs["bob"])] == ["after the restart", "@bob still there?"]


async def test_a_scheduled_run_hands_off_and_the_handed_turn_says_it_came_from_a_schedule(
    bridge_factory, tmp_path, owner
):
    from test_mcp_schedules import clock_moved_on

    made, logs = agents(tmp_path)
    running = await bridge_factory(made)
    room = await two_agents_room(owner, "scheduled")
    await say(owner, room, '@alice [[tool:schedule {"prompt": "[[relay:bob]]", "in_seconds": 3600}]]')
    await sync_until(
        owner, lambda: any(a.startswith("schedule: Scheduled as id 1") for a in answers_of(owner, room, ALICE))
    )
    await running.idle()
    clock_moved_on(running, 3700)
    await sync_until(owner, lambda: "echo: relay done" in answers_of(owner, room, BOB))
    await running.idle()
    (prompt,) = prompts(logs["bob"])
    frame = prompt.splitlines()[-2]
    assert frame.startswith("[alice handed this conversation to you from a scheduled run, not a message from the owner")
    assert "↪ alice → bob: relay done" in handoff_lines(owner, room)
