"""PostgreSQL goes away while an answer streams, and comes back (docs/outages.md).

Two faults: the server stopped (`pg_ctl stop -m fast`: every connection ended, new ones
refused) and started again; the server's processes paused (SIGSTOP: every query hangs, no
error comes) and resumed. Two homeservers: the session's Synapse (its own SQLite: only the
bridge's store goes away) and a Synapse on the same PostgreSQL server as the bridge (as
deploy/compose.yaml runs them: the homeserver goes away too, and refuses the answer's final
text meanwhile).

The agent finishes its answer while the database is away. Once it is back: the answer is
finished (never left with its status line), the message in the other DM is answered, and the
exactly-once invariants hold — each prompt reached its agent once, each message is answered
once (none shown interrupted), no finished answer is edited afterwards, and the store keeps
each message and each answer once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import pytest_asyncio
from bridge_harness import agent, answers_in, start_bridge, wait_until
from invariants import STATUS, edits_after_final, prompts_ended
from matrix_helpers import caught_up, events_in, login, open_dm, private_homeserver, sync_until

from bridge.channels.base import stream

ALICE, BOB = "@sk_alice:localhost", "@sk_bob:localhost"
pytestmark = pytest.mark.postgres


@pytest_asyncio.fixture(scope="module")
async def shared_homeserver(restartable_postgres, tmp_path_factory):
    """A Synapse whose database is on the bridge's PostgreSQL server."""
    cluster = restartable_postgres.cluster
    admin = cluster.connect()
    admin.autocommit = True
    with admin.cursor() as cursor:  # Synapse wants C collation
        cursor.execute("CREATE DATABASE synapse TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C' ENCODING 'UTF8'")
    admin.close()
    dsn = {"user": "postgres", "password": cluster.password, "host": "127.0.0.1", "port": cluster.port}
    dsn["database"] = "synapse"
    async with private_homeserver(tmp_path_factory.mktemp("shared-homeserver"), postgres=dsn) as hs:
        yield hs


class Fault:
    """PostgreSQL away: stopped (refused) or paused (hanging); then back."""

    def __init__(self, kind: str, cluster):
        self.kind, self.cluster, self.paused = kind, cluster, []

    def begin(self) -> None:
        if self.kind == "refused":
            self.cluster.shut_down()  # pg_ctl stop -m fast
            return
        postmaster = int((self.cluster.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
        self.paused = [postmaster, *(int(pid) for pid in children)]
        for pid in self.paused:
            os.kill(pid, signal.SIGSTOP)

    def end(self) -> None:
        if self.kind == "refused":
            if not (self.cluster.data / "postmaster.pid").exists():
                self.cluster.start_again()
            return
        for pid in self.paused:
            os.kill(pid, signal.SIGCONT)
        self.paused = []


def prompts(log: Path) -> list[str]:
    """The text of each session/prompt the agent received."""
    if not log.exists():
        return []
    found = []
    for line in log.read_text().splitlines():
        message = json.loads(line)
        if message.get("method") == "session/prompt":
            found.append(" ".join(block.get("text", "") for block in message["params"]["prompt"]))
    return found


@pytest.fixture(params=["own database", "shared PostgreSQL"])
def where(request):
    """The homeserver: the session's (its own database) or one on the bridge's PostgreSQL."""
    hs = request.getfixturevalue("homeserver" if request.param == "own database" else "shared_homeserver")
    return request.param, hs


@pytest.mark.parametrize("fault", ["refused", "hang"])
async def test_an_answer_that_ends_while_postgresql_is_away_is_finished_once_it_is_back(
    fault, where, restartable_postgres, drop_tables, tmp_path, monkeypatch
):
    where, hs = where
    drop_tables(restartable_postgres.url)
    away = Fault(fault, restartable_postgres.cluster)
    release = tmp_path / "release"
    alice_log, bob_log = tmp_path / "alice.jsonl", tmp_path / "bob.jsonl"
    # each answer's final sends, counted (stream.Answer tells its turn record before each one)
    finals: Counter = Counter()
    real_finishing = stream.Answer._finishing

    async def finishing(self, *args, **kwargs):
        if self._complete:  # the agent's whole answer, not one marked interrupted
            finals[self.room_id] += 1
        return await real_finishing(self, *args, **kwargs)

    monkeypatch.setattr(stream.Answer, "_finishing", finishing)
    running = await start_bridge(
        hs,
        tmp_path / "bridge",
        {
            "alice": agent("--log", str(alice_log), "--answer-size", "2000", "--chunks", "8", "--hold", str(release)),
            "bob": agent("--log", str(bob_log), "--echo-last-line", "--chunks", "2", "--hold", str(release)),
        },
        database=restartable_postgres.url,
    )
    owner = await login(hs, hs.owner_id, hs.owner_password)
    shared = where == "shared PostgreSQL"
    try:
        streaming = await open_dm(owner, ALICE)
        other = await open_dm(owner, BOB)

        def finished(room_id: str, puppet: str) -> bool:
            answers = answers_in(events_in(owner, room_id), puppet)
            return bool(answers) and not answers[-1]["body"].startswith(STATUS)

        def text_shown(room_id: str, puppet: str) -> bool:
            return any("\n\n" in a["body"] for a in answers_in(events_in(owner, room_id), puppet))

        await owner.room_send(streaming, "m.room.message", {"msgtype": "m.text", "body": "a long one"})
        if shared:  # the homeserver goes away too: the other message comes before, its answer streams
            await owner.room_send(other, "m.room.message", {"msgtype": "m.text", "body": "meanwhile"})
            await sync_until(owner, lambda: text_shown(other, BOB))
        await sync_until(owner, lambda: text_shown(streaming, ALICE))  # the answer streams
        away.begin()
        try:
            if not shared:  # the homeserver keeps this one until the bridge takes it
                await owner.room_send(other, "m.room.message", {"msgtype": "m.text", "body": "meanwhile"})
            release.touch()
            # the agents finish while the database is away
            await wait_until(lambda: prompts_ended(alice_log) == 1, 60, "alice's answer ended")
            if shared:
                await wait_until(lambda: prompts_ended(bob_log) == 1, 60, "bob's answer ended")
            if fault == "refused" and shared:
                # the homeserver refuses the final text while the database is away: it is sent
                # again more often than it used to be tried before the answer was given up
                # (left showing its status line for good)
                await wait_until(
                    lambda: finals[streaming] > stream.FINAL_ATTEMPTS,
                    60,
                    "the final text sent again and again while the database is away",
                )
            elif fault == "refused":  # a homeserver of its own takes it at once
                await sync_until(owner, lambda: finished(streaming, ALICE))
        finally:
            away.end()

        await sync_until(owner, lambda: finished(streaming, ALICE) and finished(other, BOB), timeout=120)
        await running.idle(timeout=120)
        for room_id in (streaming, other):
            await caught_up(owner, room_id)  # every edit the bridge sent is seen

        # at most once to each agent (and each had it: exactly once)
        assert [p.splitlines()[-1] for p in prompts(alice_log)] == ["a long one"], prompts(alice_log)
        assert [p.splitlines()[-1] for p in prompts(bob_log)] == ["meanwhile"], prompts(bob_log)
        # answered exactly once, none shown interrupted, no finished answer edited afterwards
        alice_answers = answers_in(events_in(owner, streaming), ALICE)
        bob_answers = answers_in(events_in(owner, other), BOB)
        assert len(alice_answers) == 1 and len(bob_answers) == 1, (alice_answers, bob_answers)
        assert bob_answers[0]["body"] == "echo: meanwhile", bob_answers
        assert not alice_answers[0]["body"].startswith(STATUS) and "interrupted" not in alice_answers[0]["body"]
        assert edits_after_final(events_in(owner, streaming), ALICE) == []
        assert edits_after_final(events_in(owner, other), BOB) == []
        # the store keeps each message and each answer once, as shown
        for room_id, shown in ((streaming, alice_answers[0]["body"]), (other, bob_answers[0]["body"])):
            stored = running.store.last_messages(running.store.channel_by_room(room_id).id, 50)
            assert len([m for m in stored if m.role == "user"]) == 1
            assert [m.text for m in stored if m.role == "agent"] == [shown]
    finally:
        away.end()
        release.touch()
        await owner.close()
        await running.stop()


@pytest.mark.parametrize("fault", ["refused", "hang"])
async def test_a_turn_whose_prompt_step_meets_the_database_away_waits_and_is_answered_once(
    fault, homeserver, restartable_postgres, drop_tables, tmp_path
):
    """The database goes away just before the turn's record says the prompt is being written:
    the agent has nothing yet, so the turn waits for the database (never shown interrupted,
    which would leave the message unanswered) and the prompt goes once it is back."""
    drop_tables(restartable_postgres.url)
    away = Fault(fault, restartable_postgres.cluster)
    alice_log = tmp_path / "alice.jsonl"
    running = await start_bridge(
        homeserver, tmp_path / "bridge", {"alice": agent("--log", str(alice_log))}, database=restartable_postgres.url
    )
    owner = await login(homeserver, homeserver.owner_id, homeserver.owner_password)
    store = running.store
    real_prompting, tries = store.turns.prompting, []

    def away_then_prompting(*args, **kwargs):  # on the database thread
        if not tries:
            away.begin()
        tries.append(args)  # after begin(): the test ends the fault only once it is whole
        return real_prompting(*args, **kwargs)

    try:
        room_id = await open_dm(owner, ALICE)
        store.turns.prompting = away_then_prompting
        await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": "just then"})
        try:
            if fault == "refused":  # tried again while the database is away
                await wait_until(lambda: len(tries) >= 3, 60, "the prompt's step tried again")
            else:  # it hangs in the database
                await wait_until(lambda: len(tries) >= 1, 60, "the prompt's step begun")
            assert prompts(alice_log) == []  # the agent has nothing while the step is not written
        finally:
            away.end()
        await sync_until(
            owner,
            lambda: any(a["body"] == "echo: just then" for a in answers_in(events_in(owner, room_id), ALICE)),
            timeout=120,
        )
        await running.idle(timeout=120)
        await caught_up(owner, room_id)
        assert [p.splitlines()[-1] for p in prompts(alice_log)] == ["just then"]
        assert [a["body"] for a in answers_in(events_in(owner, room_id), ALICE)] == ["echo: just then"]
        assert edits_after_final(events_in(owner, room_id), ALICE) == []
    finally:
        store.turns.prompting = real_prompting
        away.end()
        await owner.close()
        await running.stop()
