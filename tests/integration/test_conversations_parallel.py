"""Conversations run side by side (docs/architecture.md "Conversations and threads"), and a channel
can open threads by itself (`!threads on`): real Synapse, the owner's matrix-nio client, the real
bridge in-process, two scripted agents that log every JSON-RPC message they receive.

A turn held in one thread (the scripted agent's `[[hold:FILE]]`: it streams its first part, then
waits until the test creates FILE) keeps neither another thread nor the main timeline waiting;
inside one conversation agents still answer one at a time, in order. An agent answers one prompt
at a time wherever it is (docs/architecture.md "Who answers"): asked in a second thread, it answers
there once it is free.
"""

from __future__ import annotations

from bridge_harness import agent, answers_in
from helpers import ALICE, BOB, answered, in_thread, is_final, prompts, say, thread_of
from matrix_helpers import events_in, notice_events, sync_until
from test_channels import group


def two_agents(tmp_path):
    logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
    agents = {
        "alice": agent("--echo-last-line", "--log", str(logs["alice"]), title="Alice"),
        "bob": agent("--echo-last-line", "--log", str(logs["bob"]), title="Bob"),
    }
    return agents, logs


def answer_to(owner, room_id, sender, prompt_event) -> dict | None:
    """`sender`'s answer (edits applied) to the owner's message `prompt_event`, by its reply
    fallback (a thread message names the message it answers in `m.in_reply_to`)."""
    firsts = {e["event_id"]: e for e in events_in(owner, room_id) if e.get("type") == "m.room.message"}
    for answer in answers_in(events_in(owner, room_id), sender):
        relates = firsts[answer["event_id"]]["content"].get("m.relates_to") or {}
        if (relates.get("m.in_reply_to") or {}).get("event_id") == prompt_event and answer["msgtype"] != "m.notice":
            return answer
    return None


async def test_a_turn_held_in_one_thread_keeps_no_other_conversation_waiting(bridge_factory, tmp_path, owner):
    agents, logs = two_agents(tmp_path)
    release = tmp_path / "release"
    running = await bridge_factory(agents)
    room_id = await group(owner, ALICE, BOB, name="parallel")
    root1 = await say(owner, room_id, "@alice first topic")
    await answered(owner, room_id, ALICE, 1)
    root2 = await say(owner, room_id, "@bob second topic")
    await answered(owner, room_id, BOB, 1)
    await running.idle()

    # thread 1: alice's answer streams its first part and is held; bob is asked after her there
    held = await say(
        owner, room_id, f"@alice [[chunks:2]] [[hold:{release}]] take your time", **in_thread(root1, root1)
    )
    await sync_until(
        owner, lambda: (a := answer_to(owner, room_id, ALICE, held)) is not None and "echo" in a["body"], timeout=60
    )
    after = await say(owner, room_id, "@bob after alice", **in_thread(root1, held))

    # thread 2 and the main timeline: bob answers both while alice is still held in thread 1
    quick = await say(owner, room_id, "@bob quick one", **in_thread(root2, root2))
    await sync_until(
        owner, lambda: (a := answer_to(owner, room_id, BOB, quick)) is not None and is_final(a), timeout=60
    )
    await say(owner, room_id, "@bob and in the main timeline?")
    bob = await answered(owner, room_id, BOB, 3)
    assert thread_of(bob[1]) == root2 and bob[1]["final"] == "echo: @bob quick one"
    assert thread_of(bob[2]) == "" and bob[2]["final"] == "echo: @bob and in the main timeline?"
    assert not is_final(answer_to(owner, room_id, ALICE, held))  # still held: nothing waited for it
    # inside thread 1 bob waits for alice: his turn there has not begun
    assert answer_to(owner, room_id, BOB, after) is None
    assert [p.splitlines()[-1] for p in prompts(logs["bob"])] == [
        "@bob second topic",
        "@bob quick one",
        "@bob and in the main timeline?",
    ]

    # !stop in the main timeline stops the main timeline's answer only: there is none, said so
    stop = await say(owner, room_id, "!stop")
    await sync_until(
        owner,
        lambda: any(
            "Nothing is being answered in the main timeline" in e["content"]["body"]
            for e in notice_events(owner, room_id)
        ),
        timeout=60,
    )
    said = [e for e in notice_events(owner, room_id) if "Nothing is being answered" in e["content"]["body"]]
    assert thread_of(said[0]) == "" and stop
    assert not is_final(answer_to(owner, room_id, ALICE, held))

    # alice asked in thread 2 while held in thread 1: she answers one prompt at a time
    # (docs/architecture.md "Who answers"), so it waits for her — and the same agent answers there
    # as soon as she is free
    again = await say(owner, room_id, "@alice your turn here", **in_thread(root2, quick))
    await sync_until(
        owner,
        lambda: (
            (a := answer_to(owner, room_id, ALICE, again)) is not None
            and "answering in another conversation here" in a["body"]
        ),
        timeout=60,
    )
    assert len(prompts(logs["alice"])) == 2  # the main timeline's and the held one

    release.touch()
    await running.idle()

    def done(sender, prompt_event) -> bool:
        found = answer_to(owner, room_id, sender, prompt_event)
        return found is not None and is_final(found)

    await sync_until(owner, lambda: done(ALICE, held) and done(ALICE, again) and done(BOB, after), timeout=60)
    finished = answer_to(owner, room_id, ALICE, held)
    assert is_final(finished) and finished["body"].startswith(f"echo: @alice [[chunks:2]] [[hold:{release}]]")
    in_two = answer_to(owner, room_id, ALICE, again)
    assert is_final(in_two) and in_two["body"].startswith("echo: @alice your turn here")
    bob_after = answer_to(owner, room_id, BOB, after)
    assert bob_after is not None and bob_after["body"].startswith("echo: @bob after alice")
    firsts = {e["event_id"]: e for e in events_in(owner, room_id)}
    assert thread_of(firsts[bob_after["event_id"]]) == root1 and thread_of(firsts[in_two["event_id"]]) == root2
    # the order inside thread 1 held: bob began once alice's answer was done, and was told it
    told = prompts(logs["bob"])[-1]
    assert told.endswith("@bob after alice") and f"alice: echo: @alice [[chunks:2]] [[hold:{release}]]" in told
    order = [e["event_id"] for e in events_in(owner, room_id)]
    assert order.index(finished["event_id"]) < order.index(bob_after["event_id"])


async def test_threads_on_answers_a_top_level_message_in_a_thread_under_it(bridge_factory, tmp_path, owner):
    agents, logs = two_agents(tmp_path)
    running = await bridge_factory(agents)
    room_id = await group(owner, ALICE, BOB, name="slack")

    def said(text: str) -> list[dict]:
        return [e for e in notice_events(owner, room_id) if text in e["content"]["body"]]

    await say(owner, room_id, "!threads")
    await sync_until(owner, lambda: said("Threads are off here"), timeout=60)
    await say(owner, room_id, "!threads on")
    await sync_until(owner, lambda: said("Threads are on here"), timeout=60)

    # a top-level message to bob: his answer is in a thread under it
    asked = await say(owner, room_id, "@bob what is a goroutine?")
    bob = await answered(owner, room_id, BOB, 1)
    assert bob[0]["content"]["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": asked,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": asked},
    }
    assert bob[0]["final"] == "echo: @bob what is a goroutine?"
    await running.idle()
    # another top-level message, to alice: a thread of its own
    other = await say(owner, room_id, "@alice and a channel?")
    alice = await answered(owner, room_id, ALICE, 1)
    assert thread_of(alice[0]) == other
    await running.idle()

    # a follow-up in bob's thread with no mention: the thread's last speaker (bob) answers there,
    # though alice spoke last in the room
    await say(owner, room_id, "tell me more", **in_thread(asked, bob[0]["event_id"]))
    bob = await answered(owner, room_id, BOB, 2)
    assert thread_of(bob[1]) == asked and bob[1]["final"] == "echo: tell me more"
    await running.idle()

    # a command typed in the thread is answered in the thread
    shown = await say(owner, room_id, "!threads", **in_thread(asked, bob[1]["event_id"]))
    await sync_until(owner, lambda: len(said("Threads are on here")) == 2, timeout=60)
    reply = said("Threads are on here")[1]
    assert reply["content"]["m.relates_to"]["event_id"] == asked
    assert reply["content"]["m.relates_to"]["m.in_reply_to"] == {"event_id": shown}
    status = await say(owner, room_id, "!status", **in_thread(asked, shown))
    await sync_until(owner, lambda: said("Status of #slack (this thread)"), timeout=60)
    assert said("Status of #slack (this thread)")[0]["content"]["m.relates_to"]["m.in_reply_to"] == {"event_id": status}

    # addressed to nobody at the top level: no thread, said in the main timeline
    await say(owner, room_id, "just thinking aloud")
    await sync_until(owner, lambda: said("Nobody answers this one"), timeout=60)
    assert thread_of(said("Nobody answers this one")[0]) == ""

    # off again: answers in the main timeline
    await say(owner, room_id, "!threads off")
    await sync_until(owner, lambda: len(said("Threads are off here")) == 2, timeout=60)
    back = await say(owner, room_id, "@alice back to the main timeline")
    alice = await answered(owner, room_id, ALICE, 2)
    assert thread_of(alice[1]) == "" and alice[1]["final"] == "echo: @alice back to the main timeline"
    assert back
    await running.idle()
    # each thread had its own session: bob's two prompts in one, alice's main one in another
    assert len(prompts(logs["bob"])) == 2 and len(prompts(logs["alice"])) == 2


async def test_a_command_typed_in_a_thread_acts_on_the_threads_session_and_answers_there(
    bridge_factory, tmp_path, owner
):
    """`!mode` typed in a thread sets the mode of the member's session of that thread (each
    conversation has its own) and says so in the thread; `!help` there is answered there too."""
    from test_answers import room_with, wait_final
    from test_coding import calls, coding

    log = tmp_path / "alice.log"
    running = await bridge_factory({"alice": coding(log, "--offer", "modes")})
    room_id = await room_with(owner, name="modes")
    root = await say(owner, room_id, "hello")
    await wait_final(owner, room_id)
    await running.idle()
    main_session = calls(log, "session/prompt")[0]["sessionId"]

    def notices_about(text: str) -> list[dict]:
        return [e for e in notice_events(owner, room_id) if text in e["content"]["body"]]

    asked = await say(owner, room_id, "!mode alice plan", **in_thread(root, root))
    await sync_until(owner, lambda: notices_about("🔀"), timeout=60)
    line = notices_about("🔀")[0]
    assert line["content"]["body"] == "🔀 Alice: mode Ask → Plan"
    assert line["content"]["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": asked},
    }
    (set_mode,) = calls(log, "session/set_mode")
    assert set_mode["modeId"] == "plan" and set_mode["sessionId"] != main_session
    # the thread's prompt goes to that very session, the one whose mode was set
    await say(owner, room_id, "@alice in plan mode", **in_thread(root, line["event_id"]))
    await sync_until(owner, lambda: len(calls(log, "session/prompt")) == 2, timeout=60)
    assert calls(log, "session/prompt")[1]["sessionId"] == set_mode["sessionId"]
    await running.idle()

    helped = await say(owner, room_id, "!help", **in_thread(root, asked))
    await sync_until(owner, lambda: notices_about("What you can do in"), timeout=60)
    assert notices_about("What you can do in")[0]["content"]["m.relates_to"]["m.in_reply_to"] == {"event_id": helped}
    # the main timeline's session was not touched: its mode is still Ask
    await say(owner, room_id, "!mode alice")
    await sync_until(owner, lambda: notices_about("Alice — mode:"), timeout=60)
    shown = notices_about("Alice — mode:")[0]
    assert thread_of(shown) == "" and "▶ ask (Ask)" in shown["content"]["body"]
