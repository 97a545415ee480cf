"""Queue or steer (docs/sessions.md): real Synapse, the real bridge in-process, the scripted
agent holding its answer after the first part. A message for the agent while it answers waits,
and the running answer's status says "queued (1)"; `!queue` lists it, `!drop 1` removes it (it
never reaches the agent, its turn record is dropped); `!steer TEXT` cancels the running prompt
and asks again, in the same answer and the same turn record, what was asked plus TEXT.
"""

from __future__ import annotations

from bridge_harness import agent, answers_in, wait_until
from helpers import ALICE, open_dm, originals, prompts, received, say
from matrix_helpers import events_in, sync_until

from store.turns import DONE, DROPPED


def said(owner, room_id: str, text: str) -> bool:
    return any(text in e["content"].get("body", "") for e in originals(owner, room_id, ALICE))


async def test_a_waiting_message_is_queued_listed_dropped_and_the_running_answer_steered(
    bridge_factory, tmp_path, owner
):
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await bridge_factory({"alice": agent("--log", str(log))})
    try:
        room_id = await open_dm(owner)
        first = f"[[chunks:2]] [[hold:{release}]] first"
        await say(owner, room_id, first)
        await wait_until(lambda: len(prompts(log)) == 1)
        await say(owner, room_id, "second")

        def bodies() -> list[str]:
            return [h for a in answers_in(events_in(owner, room_id), ALICE) for h in a["history"]]

        await sync_until(owner, lambda: any("queued (1)" in b for b in bodies()), timeout=60)

        await say(owner, room_id, "!queue")
        await sync_until(owner, lambda: said(owner, room_id, "1. alice: second"), timeout=60)
        await say(owner, room_id, "!drop 1")
        await sync_until(owner, lambda: said(owner, room_id, "Dropped 1: alice will not answer “second”."), timeout=60)
        await say(owner, room_id, "!queue")
        await sync_until(owner, lambda: said(owner, room_id, "Nothing waits here."), timeout=60)

        await say(owner, room_id, "!steer go left")
        await wait_until(lambda: len(prompts(log)) == 2)
        assert prompts(log)[1] == f"{first}\n\ngo left"
        # the first prompt was cancelled before the second was sent
        methods = [m.get("method") for m in received(log) if m.get("method") in ("session/cancel", "session/prompt")]
        assert methods == ["session/prompt", "session/cancel", "session/prompt"]
        release.touch()

        def final() -> list[dict]:
            return [
                a
                for a in answers_in(events_in(owner, room_id), ALICE)
                if a["msgtype"] != "m.notice"
                and "↪ steered: go left" in a["body"]
                and a["body"].endswith("go left")
                and "queued" not in a["body"]
                and not a["body"].startswith(("⏳", "✍️", "💭"))
            ]

        await sync_until(owner, lambda: len(final()) == 1, timeout=60)
        await running.idle()
        answer = final()[0]["body"]
        assert answer.endswith(f"↪ steered: go left\n\necho: {first}\n\ngo left")
        # "second" never reached the agent; one turn answered, one dropped, each ended once
        assert not any("second" in p for p in prompts(log))
        channel = running.store.channel_by_room(room_id)
        states = [(t.text, t.state) for t in running.store.turns.in_channel(channel.id)]
        assert states == [(first, DONE), ("second", DROPPED)]
        stored = running.store.messages_in(channel.id, "", None, 20)
        assert [m.text for m in stored if m.role == "user"] == [first]  # "second" forgotten: no context
        [answered] = [m.text for m in stored if m.role == "agent"]
        assert answered.endswith(f"echo: {first}\n\ngo left")
    finally:
        release.touch()


async def test_an_agent_that_steers_in_its_turn_gets_the_text_there_in_one_turn_and_one_answer(
    bridge_factory, tmp_path, owner
):
    """An agent announcing `_meta.steering.supported` (as the Claude Code and Codex adapters do)
    gets `!steer TEXT` as a `_session/steering` request: the running prompt is neither cancelled
    nor asked again; the agent goes on and ends its one answer with what it was steered with."""
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await bridge_factory({"alice": agent("--log", str(log), "--steering")})
    try:
        room_id = await open_dm(owner)
        first = f"[[chunks:2]] [[hold:{release}]] first"
        await say(owner, room_id, first)
        await wait_until(lambda: len(prompts(log)) == 1)
        await say(owner, room_id, "!steer go left")

        def steered() -> list[dict]:
            return [m for m in received(log) if m.get("method") == "_session/steering"]

        await wait_until(lambda: steered())
        [request] = steered()
        assert request["params"]["prompt"] == [{"type": "text", "text": "go left"}]
        assert request["params"]["_meta"] == {"steering": {"idleBehavior": "promptRequired"}}
        release.touch()

        def final() -> list[dict]:
            return [
                a
                for a in answers_in(events_in(owner, room_id), ALICE)
                if a["msgtype"] != "m.notice" and a["body"].endswith("steered in: go left")
            ]

        await sync_until(owner, lambda: len(final()) == 1, timeout=60)
        await running.idle()
        assert "↪ steered: go left" in final()[0]["body"]
        methods = [m.get("method") for m in received(log) if m.get("method") in ("session/cancel", "session/prompt")]
        assert methods == ["session/prompt"]  # one prompt, never cancelled
        channel = running.store.channel_by_room(room_id)
        assert [(t.text, t.state) for t in running.store.turns.in_channel(channel.id)] == [(first, DONE)]
    finally:
        release.touch()


async def test_a_steer_the_agent_answers_prompt_required_to_is_asked_as_a_prompt(bridge_factory, tmp_path, owner):
    """`promptRequired` (the agent had no running turn for it): the text is asked as a prompt,
    in the same turn and answer, as for an agent that does not steer."""
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await bridge_factory({"alice": agent("--log", str(log), "--steering", "--steering-idle")})
    try:
        room_id = await open_dm(owner)
        first = f"[[chunks:2]] [[hold:{release}]] first"
        await say(owner, room_id, first)
        await wait_until(lambda: len(prompts(log)) == 1)
        await say(owner, room_id, "!steer go left")
        await wait_until(lambda: len(prompts(log)) == 2)
        assert prompts(log)[1] == f"{first}\n\ngo left"
        methods = [m.get("method") for m in received(log) if m.get("method", "").startswith(("session/", "_session/"))]
        assert methods[-4:] == ["session/prompt", "_session/steering", "session/cancel", "session/prompt"], methods
        release.touch()
        await running.idle()
        channel = running.store.channel_by_room(room_id)
        assert [(t.text, t.state) for t in running.store.turns.in_channel(channel.id)] == [(first, DONE)]
    finally:
        release.touch()
