"""`kill -9` of the bridge, again and again, under traffic (docs/reliability.md "Restarts").

The bridge runs as `sidekicks run` in a subprocess against a private Synapse; the owner keeps
writing; the bridge is killed with SIGKILL at random moments and started again. At the end:
every owner message has exactly one finished answer, no finished answer is stored twice or
missing from the store, and nothing else was answered. The figures are printed.

The suite kills 30 times (`SIDEKICKS_KILLS`); the soak of the same scene, 1,000 kills, is
`python -m tests.bench.bench_kills` (docs/reliability.md "Restarts"), which runs it in batches,
each with a seed of its own (`SIDEKICKS_KILLS_SEED`), and reads each batch's figures from the file
`SIDEKICKS_KILLS_FIGURES` names.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
from bridge_harness import agent, answers_in, write_config
from matrix_helpers import login, open_dm, record_figures, sync_until

from bridge.channels.recovery.recovery import UNSURE_TEXT as UNSURE
from store.turns import LIVE

KILLS = int(os.environ.get("SIDEKICKS_KILLS", "30"))
SEED = int(os.environ.get("SIDEKICKS_KILLS_SEED", "20261202"))
STATUS = ("⏳", "💭", "✍️", "🔧")


class BridgeProcess:
    def __init__(self, config: Path, xdg: Path, log: Path):
        self.config, self.xdg, self.log = config, xdg, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = {**os.environ, "XDG_CONFIG_HOME": str(self.xdg), "PYTHONUNBUFFERED": "1"}
        with self.log.open("a") as sink:
            sink.write("---- start\n")
            sink.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bridge", "run", "-c", str(self.config)],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )

    async def ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text()
            if text.rsplit("---- start", 1)[-1].count("bridge ready"):
                return
            if self.proc.poll() is not None:
                raise AssertionError("the bridge exited:\n" + text[-3000:])
            await asyncio.sleep(0.05)
        raise AssertionError("the bridge did not get ready:\n" + self.log.read_text()[-3000:])

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()  # SIGKILL cannot be caught: the process is gone at once

    async def stop(self, timeout: float = 120) -> int:
        """SIGINT, then wait for the graceful stop without blocking the event loop."""
        self.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, "the bridge did not stop after SIGINT"
            await asyncio.sleep(0.05)
        return self.proc.returncode


def pending_work(data: Path) -> int:
    """Turns not over in the bridge's store (read-only, beside the running bridge): owner
    messages not yet answered, answers not yet finished (store/turns.py)."""
    db = data / "sidekicks.db"
    if not db.exists():
        return -1
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as connection:
        live = ",".join(f"'{state}'" for state in LIVE)  # every state not over
        return connection.execute(f"SELECT count(*) FROM sk_turn WHERE state IN ({live})").fetchone()[0]


def prompted_messages(log: Path) -> list[str]:
    """The owner message each session/prompt the agent read was for (its last line)."""
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if record.get("method") == "session/prompt":
            text = "".join(b.get("text", "") for b in record.get("params", {}).get("prompt", []) if isinstance(b, dict))
            out.append(text.splitlines()[-1] if text else "")
    return out


async def full_history(hs, token: str, room_id: str) -> list[dict]:
    """Every event of the room, oldest first (paginating /messages forwards)."""
    events, since = [], None
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
        while True:
            url = f"{hs.url}/_matrix/client/v3/rooms/{room_id}/messages?dir=f&limit=500"
            if since:
                url += f"&from={since}"
            async with http.get(url) as response:
                body = await response.json()
            events.extend(body.get("chunk") or [])
            if not body.get("chunk") or not body.get("end"):
                return events
            since = body["end"]


def timeline(history: list[dict], puppet_id: str, echoes: Counter, focus: str | None = None) -> str:
    """The room as the owner saw it, one line per message (answers with their first words and
    their last line, the message they echo), the part around the first message answered twice
    (or `focus`, the first message whose answer is out of place): for the failure message."""
    answers = {a["event_id"]: a for a in answers_in(history, puppet_id)}
    lines = []
    for event in history:
        if event.get("type") != "m.room.message":
            continue
        if event.get("sender") == puppet_id and event["event_id"] in answers:
            body = answers[event["event_id"]]["body"]
            shown = body.replace("\n", " ⏎ ")
            if len(shown) > 90:
                shown = f"{shown[:40]} … {body.splitlines()[-1][:45]}"
            lines.append(f"  answer {event['event_id'][:10]} {event['origin_server_ts']}: {shown}")
        elif event.get("sender") != puppet_id:
            text = (event.get("content") or {}).get("body", "")
            mark = "  <- answered twice" if echoes.get(text, 0) > 1 else ""
            mark = mark or ("  <- its answer is out of place" if text == focus else "")
            lines.append(f"owner {event['origin_server_ts']}: {text}{mark}")
    first = next(
        (i for i, line in enumerate(lines) if line.endswith(("answered twice", "out of place"))), len(lines) - 30
    )
    return "\n".join(lines[max(first - 12, 0) : first + 30])


async def test_kills_at_random_moments_lose_nothing_and_answer_nothing_twice(private_hs, tmp_path):
    hs, rng = private_hs, random.Random(SEED)
    folder = tmp_path / "bridge"
    agent_log = tmp_path / "alice.log"  # every JSON-RPC message the agent read
    # the agent echoes the owner's message only (the prompt's last line), so that every answer is
    # one Matrix message. Echoing the whole prompt, an answer also echoes the messages the agent
    # has not seen (after a kill, a fresh session's recent past), earlier answers among them —
    # echoes of their own prompts —, and under load past 15,000 characters it goes on in a new
    # message (docs/architecture.md "Design notes", streaming sizes): the count below, one message per answer,
    # would take that for an answer too many
    alice = agent("--chunks", "4", "--delay", "0.05", "--log", str(agent_log), "--echo-last-line")
    config = write_config(hs, folder, {"alice": alice})
    bridge = BridgeProcess(config, tmp_path / "xdg", tmp_path / "bridge.log")
    owner = await login(hs, hs.owner_id, hs.owner_password)
    puppet_id = "@sk_alice:localhost"
    sent: list[str] = []
    text_of: dict[str, str] = {}  # the event id of each owner message → its text
    started = time.monotonic()
    try:
        bridge.start()
        await bridge.ready()
        room_id = await open_dm(owner, puppet_id)
        for _kill in range(KILLS):
            for _ in range(rng.choice((1, 1, 2))):
                text = f"msg {len(sent)}"
                response = await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": text})
                text_of[response.event_id] = text
                sent.append(text)
            await asyncio.sleep(rng.uniform(0, 0.8))  # a random moment, not a wait: then the kill
            bridge.kill()
            if rng.random() < 0.3:  # sometimes the owner writes while the bridge is down
                text = f"msg {len(sent)}"
                response = await owner.room_send(room_id, "m.room.message", {"msgtype": "m.text", "body": text})
                text_of[response.event_id] = text
                sent.append(text)
            bridge.start()
            await bridge.ready()

        async def settled() -> bool:
            # every message has its answer, finished or marked interrupted, and none is streaming
            answers = answers_in(await full_history(hs, owner.access_token, room_id), puppet_id)
            done = [a for a in answers if not a["body"].startswith(STATUS)]
            state["last"] = (len(sent), len(done), [a["body"][:60] for a in answers if a["body"].startswith(STATUS)])
            return len(done) >= len(sent) and not any(a["body"].startswith(STATUS) and a["edits"] for a in answers)

        state = {}
        try:
            await sync_until(owner, settled, timeout=300)
        except AssertionError:
            raise AssertionError(f"not settled: {state} \n" + bridge.log.read_text()[-4000:]) from None
        # every answer is out; wait until the last turns are also crossed out in the store
        data = next((tmp_path / "xdg" / "sidekicks" / "data").iterdir())
        deadline = time.monotonic() + 120
        while pending_work(data) != 0:
            assert time.monotonic() < deadline, f"work still pending: {pending_work(data)}"
            await asyncio.sleep(0.1)
        assert await bridge.stop() == 0
    finally:
        if bridge.proc is not None and bridge.proc.poll() is None:
            bridge.kill()

    history = await full_history(hs, owner.access_token, room_id)
    await owner.close()
    answers = answers_in(history, puppet_id)
    # an answer still showing a status line was neither finished nor marked: it must not happen
    stale = [a for a in answers if a["body"].startswith(STATUS)]
    real = [a for a in answers if not a["body"].startswith(STATUS)]
    finished = [a for a in real if "interrupted" not in a["body"]]
    interrupted = [a for a in real if "interrupted" in a["body"]]

    def echoed(answer: dict) -> str:
        return answer["body"].splitlines()[-1].removeprefix("echo: ")

    extra = max(len(real) - len(sent), 0)
    echoes = Counter(echoed(a) for a in finished)
    finished_twice = sum(n - 1 for n in echoes.values() if n > 1)
    unknown = sum(n for text, n in echoes.items() if text not in set(sent))
    from store import Store

    data = next((tmp_path / "xdg" / "sidekicks" / "data").iterdir())
    store = Store.open("sqlite", data)
    try:
        channel = store.channel_by_room(room_id)
        stored = store.last_messages(channel.id, 100_000)
        turns = store.turns.in_channel(channel.id)
    finally:
        store.close()
    # the message each answer belongs to: a finished one echoes it; one marked interrupted has no
    # text of its own to tell, and is its turn's (the record names the prompt's event and the
    # answer's messages, store/turns.py). Not by its place: one out of place would then be taken
    # for another message's, and its fault counted under the wrong name
    finished_ids = {a["event_id"] for a in finished}
    turn_of = {event_id: turn for turn in turns for event_id in turn.answer}

    def message_of(answer: dict) -> str | None:
        if answer["event_id"] in finished_ids:
            return echoed(answer)
        turn = turn_of.get(answer["event_id"])
        return text_of.get(turn.prompt_event) if turn is not None else None

    # one portal, one turn at a time: the answers come in the order of their messages. An answer
    # out of place is one whose message was sent before that of an answer above it
    place = {text: i for i, text in enumerate(sent)}
    out_of_order, newest, misplaced = 0, -1, None
    for answer in real:
        i = place.get(message_of(answer) or "", -1)
        if i < 0:
            continue  # an answer to nothing sent: counted as answered twice
        if i < newest:
            out_of_order += 1
            misplaced = misplaced or message_of(answer)
        newest = max(newest, i)
    # which messages reached the agent in a session/prompt (the owner's text is the prompt's
    # last line, after any context): an answer marked interrupted must be one that had begun
    prompted = Counter(prompted_messages(agent_log))
    # (the bridge records a prompt before it writes it, so that a prompt is never written twice:
    # stopped in that instant, it cannot know whether the agent got it, and says so —
    # "may not have reached it" — instead of claiming an answer had begun)
    unsure = [a for a in interrupted if UNSURE in a["body"]]
    unsure_ids = {a["event_id"] for a in unsure}
    interrupted_unbegun = sum(
        1
        for a in interrupted
        if a["event_id"] not in unsure_ids and message_of(a) is not None and not prompted[message_of(a)]
    )
    rerun = sum(
        int(n) for n in re.findall(r"(\d+) answer\(s\) the last stop left before they began", bridge.log.read_text())
    )
    stored_users = [m for m in stored if m.role == "user"]
    stored_agent_events = [e for m in stored if m.role == "agent" for e in m.event_ids]
    figures = {
        "kills": KILLS,
        "messages": len(sent),
        "finished answers": len(finished),
        "interrupted (marked)": len(interrupted),
        "interrupted before it began": interrupted_unbegun,
        "interrupted answers no turn claims": sum(1 for a in interrupted if message_of(a) is None),
        "stopped as the prompt was handed over (said so)": len(unsure),
        "never begun, run again": rerun,
        "prompts read twice by the agent": sum(n - 1 for n in prompted.values() if n > 1),
        "placeholders left": len(stale),
        "lost": max(len(sent) - len(real), 0),
        "answered twice": max(extra, finished_twice) + unknown,
        "out of order": out_of_order,
        "user messages stored twice": len(stored_users) - len({m.event_ids for m in stored_users}),
        "finished answers not stored": sum(1 for a in finished if a["event_id"] not in stored_agent_events),
        "answers stored twice": len(stored_agent_events) - len(set(stored_agent_events)),
        "stored answers shown as interrupted": sum(1 for a in interrupted if a["event_id"] in stored_agent_events),
        "seconds": round(time.monotonic() - started),
    }
    record_figures("kill -9", figures)
    if os.environ.get("SIDEKICKS_KILLS_FIGURES"):  # the soak's batch (tests/bench/bench_kills.py)
        Path(os.environ["SIDEKICKS_KILLS_FIGURES"]).write_text(json.dumps(figures))
    if figures["lost"] or figures["answered twice"] or out_of_order:
        raise AssertionError(f"{figures}\n{timeline(history, puppet_id, echoes, misplaced)}")
    assert figures["user messages stored twice"] == 0 and len(stored_users) == len(sent), figures
    assert figures["finished answers not stored"] == 0 and figures["answers stored twice"] == 0, figures
    assert figures["stored answers shown as interrupted"] == 0, figures
    assert figures["placeholders left"] == 0, figures  # every cut answer says so
    assert figures["interrupted answers no turn claims"] == 0, figures
    assert figures["interrupted before it began"] == 0, figures  # those are run again instead
