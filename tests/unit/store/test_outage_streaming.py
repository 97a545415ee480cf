"""PostgreSQL goes away while an answer is streaming, and the agent goes on streaming
(docs/outages.md "The database away mid-answer").

The agent sends a chunk every 0.1 s for 10 s; the database goes away once its text has begun
(stopped: `pg_ctl stop -m fast`, every connection refused; or paused: SIGSTOP, every query
hangs) and comes back once the answer has grown well past where it was. Meanwhile the owner
writes in another DM. The store's calls of the turn meet the database away in the middle of
the stream: none of them may end the answer. While the database is away the answer is still
edited (at most MAX_GAP apart, as the agent streams); once it is back it is finished with the
agent's whole text, stored once, and the other DM is answered once.
"""

from __future__ import annotations

import time

import pytest
from bridge_harness import agent, answers_in, start_bridge
from invariants import STATUS, edits_after_final, prompts_ended
from matrix_helpers import caught_up, events_in, login, open_dm, sync_until
from test_outage_mid_answer import Fault, prompts

ALICE, BOB = "@sk_alice:localhost", "@sk_bob:localhost"
SIZE, CHUNKS, DELAY = 3000, 100, 0.1  # the agent's answer: 100 chunks, 0.1 s apart
MAX_GAP = 3.0  # seconds at most between two edits of the streaming answer while the database is away
pytestmark = pytest.mark.postgres


def _whole_text() -> str:
    """What the scripted agent answers with `--answer-size SIZE` (tests/agents/scripted_agent.py)."""
    line = "The quick brown fox jumps over the lazy dog. 0123456789\n"
    return (line * (SIZE // len(line) + 1))[:SIZE]


def _edit_times(events: list[dict], sender: str) -> list[float]:
    """When the homeserver took each edit `sender` made (seconds, its clock: this machine's)."""
    return [
        e["origin_server_ts"] / 1000
        for e in events
        if e.get("type") == "m.room.message"
        and e.get("sender") == sender
        and ((e.get("content") or {}).get("m.relates_to") or {}).get("rel_type") == "m.replace"
    ]


@pytest.mark.parametrize("fault", ["refused", "hang"])
async def test_an_answer_streaming_while_postgresql_is_away_goes_on_and_is_stored_once(
    fault, homeserver, restartable_postgres, drop_tables, tmp_path
):
    drop_tables(restartable_postgres.url)
    away = Fault(fault, restartable_postgres.cluster)
    alice_log, bob_log = tmp_path / "alice.jsonl", tmp_path / "bob.jsonl"
    streaming_agent = agent(
        "--log", str(alice_log), "--answer-size", str(SIZE), "--chunks", str(CHUNKS), "--delay", str(DELAY)
    )
    running = await start_bridge(
        homeserver,
        tmp_path / "bridge",
        {"alice": streaming_agent, "bob": agent("--log", str(bob_log), "--echo-last-line")},
        database=restartable_postgres.url,
    )
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    try:
        streaming = await open_dm(owner, ALICE)
        other = await open_dm(owner, BOB)

        def shown() -> int:
            """How much of the answer's text the owner sees (its status line left out)."""
            answers = [a for a in answers_in(events_in(owner, streaming), ALICE) if a["msgtype"] != "m.notice"]
            body = answers[-1]["body"] if answers else ""
            if body.startswith(STATUS):
                return len(body.split("\n\n", 1)[1]) if "\n\n" in body else 0
            return len(body)

        def final(room_id: str, puppet: str) -> str | None:
            """The text of the puppet's last answer there once finished (None while it streams)."""
            answers = [a for a in answers_in(events_in(owner, room_id), puppet) if a["msgtype"] != "m.notice"]
            return answers[-1]["body"] if answers and not answers[-1]["body"].startswith(STATUS) else None

        await owner.room_send(streaming, "m.room.message", {"msgtype": "m.text", "body": "a long one"})
        await sync_until(owner, lambda: shown() > 0)  # its text has begun to stream
        away.begin()
        began = time.time()
        try:
            at_fault = shown()
            await owner.room_send(other, "m.room.message", {"msgtype": "m.text", "body": "meanwhile"})
            # a third of the answer more is shown while the database is away: it went on streaming
            await sync_until(owner, lambda: shown() >= min(at_fault + SIZE // 3, SIZE), timeout=60)
            # and it is finished, with the agent's whole text, while the database is still away
            await sync_until(owner, lambda: final(streaming, ALICE) == _whole_text(), timeout=60)
            assert prompts_ended(alice_log) == 1
        finally:
            ended = time.time()
            away.end()
        await sync_until(owner, lambda: final(other, BOB) == "echo: meanwhile", timeout=120)
        await running.idle(timeout=120)
        for room_id in (streaming, other):
            await caught_up(owner, room_id)

        # edited all along while the database was away
        times = [began, *(t for t in _edit_times(events_in(owner, streaming), ALICE) if began <= t <= ended), ended]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert max(gaps) <= MAX_GAP, gaps
        # each prompt once, each message answered once with the whole text, nothing edited after
        assert [p.splitlines()[-1] for p in prompts(alice_log)] == ["a long one"], prompts(alice_log)
        assert [p.splitlines()[-1] for p in prompts(bob_log)] == ["meanwhile"], prompts(bob_log)
        for room_id, puppet, shown_text in ((streaming, ALICE, _whole_text()), (other, BOB, "echo: meanwhile")):
            answers = [a for a in answers_in(events_in(owner, room_id), puppet) if a["msgtype"] != "m.notice"]
            assert [a["body"] for a in answers] == [shown_text]
        assert edits_after_final(events_in(owner, streaming), ALICE) == []
        for room_id, shown_text in ((streaming, _whole_text()), (other, "echo: meanwhile")):
            stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
            assert len([m for m in stored if m.role == "user"]) == 1
            assert [m.text for m in stored if m.role == "agent"] == [shown_text]
    finally:
        away.end()
        await owner.close()
        await running.stop()
