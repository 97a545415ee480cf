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
