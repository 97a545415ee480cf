"""The homeserver killed (`kill -9`), not stopped, then started again.

During a streaming answer and during a burst of owner messages: each answer completes once
(every send carries a transaction id kept until the homeserver answers, so a send that landed
before the kill is not posted again), no owner message is lost, and the backlog Synapse kept
arrives once it is back. A private Synapse: these tests kill it.
"""

from __future__ import annotations

from collections import Counter

from bridge_harness import agent, answers_in, start_bridge
from helpers import away_while_the_answer_ends, lost_on_the_way, open_dm
from matrix_helpers import events_in, login, record_figures, sync_until
from test_homeserver_faults import prompts

PUPPET = "@sk_alice:localhost"
STATUS = ("⏳", "💭", "✍️", "🔧")


def settled(owner, room_id, count: int):
    def done() -> bool:
        answers = answers_in(events_in(owner, room_id), PUPPET)
        return len(answers) >= count and not any(a["body"].startswith(STATUS) for a in answers)

    return done


async def test_an_answer_streaming_when_the_homeserver_is_killed_completes_once(private_hs, tmp_path):
    hs = private_hs
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await start_bridge(hs, tmp_path / "bridge", {"alice": agent("--log", str(log))})
    owner = await login(hs, hs.owner_id, hs.owner_password)
    try:
        room_id = await open_dm(owner, PUPPET)
        await owner.room_send(
            room_id, "m.room.message", {"msgtype": "m.text", "body": f"[[chunks:6]] [[hold:{release}]] keep going"}
        )
        await sync_until(owner, lambda: any(a["edits"] >= 1 for a in answers_in(events_in(owner, room_id), PUPPET)))
        owner = await away_while_the_answer_ends(hs, owner, log, release)
        await sync_until(owner, settled(owner, room_id, 1))
        await running.idle()
        answers = answers_in(events_in(owner, room_id), PUPPET)
        assert len(answers) == 1, [a["body"] for a in answers]
        assert answers[0]["body"].startswith("echo: ") and answers[0]["body"].endswith("keep going")
        stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 10)
        assert [m.role for m in stored] == ["user", "agent"] and stored[1].text == answers[0]["body"]
        assert len(prompts(log)) == 1
        record_figures("homeserver kill -9 mid-answer", {"answers": len(answers), "prompts": len(prompts(log))})
    finally:
        release.touch()
        await owner.close()
        await running.stop()


async def test_a_burst_of_messages_when_the_homeserver_is_killed_is_answered_once_each(private_hs, tmp_path):
    hs = private_hs
    log = tmp_path / "alice.log"
    running = await start_bridge(
        hs, tmp_path / "bridge", {"alice": agent("--log", str(log), "--chunks", "3", "--delay", "0.05")}
    )
    owner = await login(hs, hs.owner_id, hs.owner_password)
    sent = [f"burst {n}" for n in range(6)]
    try:
        room_id = await open_dm(owner, PUPPET)
        for text in sent[:3]:
            await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": text})
        # the first answer has begun: the kill lands with answers streaming and messages queued
        await sync_until(
            owner,
            lambda: any(
                a["edits"] >= 1 or not a["body"].startswith(STATUS)
                for a in answers_in(events_in(owner, room_id), PUPPET)
            ),
        )
        await owner.close()
        hs.server.kill()
        await hs.server.start()
        owner = await login(hs, hs.owner_id, hs.owner_password)
        for text in sent[3:]:  # and the owner goes on writing once it is back
            await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": text})
        await sync_until(owner, settled(owner, room_id, len(sent)))
        await running.idle()
        answers = answers_in(events_in(owner, room_id), PUPPET)
        echoed = Counter(a["body"].splitlines()[-1].removeprefix("echo: ") for a in answers)
        figures = {
            "messages": len(sent),
            "answers": len(answers),
            "lost": sum(1 for text in sent if not echoed[text]),
            "answered twice": sum(n - 1 for n in echoed.values() if n > 1),
            "interrupted": sum(1 for a in answers if "interrupted" in a["body"]),
        }
        record_figures("homeserver kill -9 in a burst", figures)
        assert figures["lost"] == 0 and figures["answered twice"] == 0 and len(answers) == len(sent), (
            figures,
            [a["body"] for a in answers],
        )
        # each message reached the agent once (its text is the prompt's last line)
        asked = Counter(
            "".join(b.get("text", "") for b in p["params"]["prompt"]).splitlines()[-1] for p in prompts(log)
        )
        assert all(asked[text] == 1 for text in sent), asked
    finally:
        await owner.close()
        await running.stop()


async def test_a_message_the_homeserver_never_handed_on_is_read_back_once_it_answers_again(private_hs, tmp_path):
    """A killed Synapse can lose events for the appservice API: it moves the appservice's stream
    position past the events it has queued in memory. To the bridge that is a message that never
    arrives — here its transaction is dropped before the bridge handles it (acknowledged, as the
    homeserver would count it). The homeserver then dies during an answer and comes back: the
    bridge, seeing its requests fail and then answered, reads the channel back and answers the
    lost message, once (matrix/reachability.py, inbound.catch_up_since)."""
    hs = private_hs
    log, release = tmp_path / "alice.log", tmp_path / "release"
    running = await start_bridge(hs, tmp_path / "bridge", {"alice": agent("--log", str(log))})
    owner = await login(hs, hs.owner_id, hs.owner_password)
    try:
        room_id = await open_dm(owner, PUPPET)
        await lost_on_the_way(running, owner, room_id, PUPPET, "lost on the way")
        await owner.room_send(
            room_id, "m.room.message", {"msgtype": "m.text", "body": f"[[chunks:6]] [[hold:{release}]] keep going"}
        )
        await sync_until(owner, lambda: any(a["edits"] >= 1 for a in answers_in(events_in(owner, room_id), PUPPET)))
        assert not any("lost on the way" in p["params"]["prompt"][0]["text"] for p in prompts(log))
        owner = await away_while_the_answer_ends(hs, owner, log, release)  # the bridge's next edits meet it dead
        await sync_until(
            owner,
            lambda: any(a["body"] == "echo: lost on the way" for a in answers_in(events_in(owner, room_id), PUPPET)),
        )
        await sync_until(owner, settled(owner, room_id, 2))
        await running.idle()
        bodies = [a["body"] for a in answers_in(events_in(owner, room_id), PUPPET)]
        assert bodies.count("echo: lost on the way") == 1 and len(bodies) == 2, bodies
        asked = [p for p in prompts(log) if "lost on the way" in p["params"]["prompt"][0]["text"].splitlines()[-1]]
        assert len(asked) == 1
    finally:
        release.touch()
        await owner.close()
        await running.stop()
