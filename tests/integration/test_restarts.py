"""Exactly once across restarts (docs/reliability.md "Exactly once"): the bridge is stopped again
and again — SIGTERM or kill -9, at random moments, sometimes while it starts — while the owner keeps
writing, also while it is down and while it starts. Two agents share one slot (a turn waits for the
slot and for the other agent); one loads its sessions (`loadSession`), one does not; one room is a
plain DM, the other an encrypted channel where both answer one message, one after the other. Some of
the channel's messages go into one of two threads
(docs/architecture.md "Conversations and threads"), hung on its first two messages.

Checked at the end, from the agents' own logs and the owner's client, per conversation (the DM,
the channel's main timeline, each thread):
- each message reached each agent it addressed at most once;
- it was answered exactly once, or shown interrupted exactly once (an answer of each agent, in
  the order of the messages; a finished one echoes its message);
- an answer to a thread message is in that thread (`m.relates_to`: the thread, its reply
  fallback the message answered); a main-timeline answer is in no thread;
- a message marked interrupted had reached its agent (one that had not is answered instead);
- no finished answer was ever edited afterwards;
- nothing is left unfinished in the store.

`SIDEKICKS_RESTARTS` sets the number of stops (default 30); tests/bench/bench_restarts.py runs
the same scenario with 500 and prints the figures.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

from bridge_harness import agent, answers_in, write_config
from matrix_helpers import caught_up, events_in, private_homeserver, record_figures, sync_until, wait_joined
from test_e2ee import ENCRYPTED, e2e_login, say
from test_kill9 import BridgeProcess, pending_work, prompted_messages

from bridge.channels.recovery.recovery import UNSURE_TEXT as UNSURE

RESTARTS = int(os.environ.get("SIDEKICKS_RESTARTS", "30"))
STATUS = ("⏳", "💭", "✍️", "🔧", "⏸")
ALICE, BOB = "@sk_alice:localhost", "@sk_bob:localhost"


def is_final(body: str) -> bool:
    return not body.startswith(STATUS) and body != "…"


def echoed(body: str) -> str:
    return body.splitlines()[-1].removeprefix("echo: ")


def in_thread(root: str) -> dict:
    """The content fields of a message in the thread of `root`, as Element sends the first one."""
    return {
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": root},
        }
    }


def thread_of(event: dict) -> str:
    """The thread an event is in ("" the main timeline)."""
    relates = (event.get("content") or {}).get("m.relates_to") or {}
    return relates.get("event_id", "") if relates.get("rel_type") == "m.thread" else ""


async def terminate(bridge: BridgeProcess, timeout: float = 120) -> None:
    """SIGTERM, and the clean stop it starts, within a bounded time."""
    bridge.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while bridge.proc.poll() is None:
        # (the log's tail says which step of the clean stop (bridge.py `stop`) it was in)
        assert time.monotonic() < deadline, "the bridge did not stop after SIGTERM:\n" + bridge.log.read_text()[-4000:]
        await asyncio.sleep(0.05)


async def run_scenario(tmp_path: Path, restarts: int, seed: int) -> dict:
    rng = random.Random(seed)
    # which conversation a channel message goes into: a generator of its own, so the messages,
    # the stops and their moments are those of `seed` with or without threads
    placing = random.Random(f"{seed} threads")
    async with private_homeserver(tmp_path / "hs") as hs:
        folder = tmp_path / "bridge"
        logs = {"alice": tmp_path / "alice.log", "bob": tmp_path / "bob.log"}
        config = write_config(
            hs,
            folder,
            {
                "alice": agent(
                    "--chunks",
                    "4",
                    "--delay",
                    "0.05",
                    "--log",
                    str(logs["alice"]),
                    "--echo-last-line",
                    "--load-session",
                    "--state",
                    str(tmp_path / "alice-state"),
                    title="Alice",
                ),
                "bob": agent(
                    "--chunks", "3", "--delay", "0.05", "--log", str(logs["bob"]), "--echo-last-line", title="Bob"
                ),
            },
            encryption="on",
            limits={"agents_in_memory": 1},
        )
        bridge = BridgeProcess(config, tmp_path / "xdg", tmp_path / "bridge.log")
        owner, seen = await e2e_login(hs, hs.owner_id, hs.owner_password)
        # (room, conversation, text, agents it addresses in answering order, its event)
        sent: list[tuple[str, str, str, tuple[str, ...], str]] = []
        roots: list[str] = []  # the channel's first two main-timeline messages: the threads' roots
        counts = Counter()
        started = time.monotonic()
        try:
            bridge.start()
            await bridge.ready()
            dm = (await owner.room_create(is_direct=True, invite=[ALICE])).room_id
            await wait_joined(owner, dm, ALICE)
            channel = (await owner.room_create(name="restarts", invite=[ALICE, BOB], initial_state=ENCRYPTED)).room_id
            await wait_joined(owner, channel, ALICE, BOB)

            async def write() -> None:
                n, conversation, extra = len(sent), "", {}
                if rng.random() < 0.4:
                    room, text, agents = dm, f"dm {n}", ("alice",)
                else:
                    text, agents = rng.choice(
                        [
                            (f"@alice @bob both {n}", ("alice", "bob")),
                            (f"@bob only {n}", ("bob",)),
                            (f"@alice only {n}", ("alice",)),
                        ]
                    )
                    room = channel
                    if len(roots) == 2 and placing.random() < 0.5:  # into a thread
                        conversation = placing.choice(roots)
                        extra = in_thread(conversation)
                event_id = await say(owner, room, text, **extra)
                if room == channel and not conversation and len(roots) < 2:
                    roots.append(event_id)
                sent.append((room, conversation, text, agents, event_id))

            for _ in range(restarts):
                for _ in range(rng.choice((1, 1, 2))):
                    await write()
                await asyncio.sleep(rng.uniform(0, 1.0))  # a random moment, not a wait
                if rng.random() < 0.5:
                    counts["SIGTERM"] += 1
                    await terminate(bridge)
                else:
                    counts["kill -9"] += 1
                    bridge.kill()
                if rng.random() < 0.3:
                    counts["written while down"] += 1
                    await write()
                bridge.start()
                if rng.random() < 0.3:  # while it starts
                    counts["written while starting"] += 1
                    await write()
                if rng.random() < 0.15:  # and stopped again before it is ready
                    await asyncio.sleep(rng.uniform(0, 1.5))
                    counts["kill -9 during start-up"] += 1
                    bridge.kill()
                    bridge.start()
                await bridge.ready()

            places = [(dm, ""), (channel, ""), *((channel, root) for root in roots)]
            # each conversation's messages to each agent: (text, event id), in order
            expected = {
                (room, conversation, name): [
                    (text, event_id)
                    for r, c, text, agents, event_id in sent
                    if (r, c) == (room, conversation) and name in agents
                ]
                for room, conversation in places
                for name in ("alice", "bob")
            }

            def answers(room: str, conversation: str, name: str) -> list[dict]:
                """The agent's messages in the conversation, edits applied, each with its
                original `m.relates_to` (as first sent: an edit keeps its original's)."""
                sender = ALICE if name == "alice" else BOB
                events = events_in(owner, room)
                first = {e["event_id"]: e for e in events if e.get("sender") == sender}
                return [
                    {**a, "relates_to": (first[a["event_id"]]["content"].get("m.relates_to") or {})}
                    for a in answers_in(events, sender)
                    if thread_of(first[a["event_id"]]) == conversation
                ]

            def where(room: str, conversation: str, name: str) -> str:
                return f"{name} in {'dm' if room == dm else 'channel'}" + (
                    f" (thread {roots.index(conversation) + 1})" if conversation else ""
                )

            def settled() -> bool:
                return all(
                    len(answers(room, conversation, name)) >= len(texts)
                    and all(is_final(a["body"]) for a in answers(room, conversation, name))
                    for (room, conversation, name), texts in expected.items()
                )

            try:
                await sync_until(owner, settled, timeout=300)
            except AssertionError:
                report = []
                for (room, conversation, name), texts in expected.items():
                    got = answers(room, conversation, name)
                    report.append(
                        f"{where(room, conversation, name)}: {len(texts)} messages, "
                        f"{len(got)} answers; not final: "
                        f"{[a['body'][-60:] for a in got if not is_final(a['body'])]}"
                    )
                undecryptable = [e for r, e in seen.undecryptable if r in (dm, channel)]
                raise AssertionError(
                    "not settled:\n" + "\n".join(report) + f"\nundecryptable events: {len(undecryptable)}"
                ) from None
            data = next((tmp_path / "xdg" / "sidekicks" / "data").iterdir())
            deadline = time.monotonic() + 120
            while pending_work(data) != 0:
                assert time.monotonic() < deadline, f"turns still unfinished: {pending_work(data)}"
                await asyncio.sleep(0.1)
            await caught_up(owner, dm)
            await caught_up(owner, channel)
            await terminate(bridge)
        finally:
            if bridge.proc is not None and bridge.proc.poll() is None:
                bridge.kill()
            await owner.close()

    prompted = {name: Counter(prompted_messages(log)) for name, log in logs.items()}
    figures = {
        "stops": restarts,
        **counts,
        "messages": len(sent),
        "in threads": sum(1 for _, conversation, *_ in sent if conversation),
        "turns": 0,
        "finished": 0,
        "interrupted": 0,
        "prompted twice": 0,
        "answered twice or lost": 0,
        "echoes wrong": 0,
        "interrupted before it reached the agent": 0,
        "stopped as the prompt was handed over (said so)": 0,
        "finished answers edited afterwards": 0,
        "answers out of their thread": 0,
        "undecryptable": sum(1 for room, _ in seen.undecryptable if room == channel),
    }
    problems = []
    conversation_of = {(room, text): conversation for room, conversation, text, _, _ in sent}
    for (room, conversation, name), texts in expected.items():
        got = answers(room, conversation, name)
        figures["turns"] += len(texts)
        if len(got) != len(texts):
            figures["answered twice or lost"] += abs(len(got) - len(texts))
            problems.append(
                f"{where(room, conversation, name)}: {len(texts)} messages, "
                f"{len(got)} answers: {[a['body'][-40:] for a in got]}"
            )
        for (text, event_id), answer in zip(texts, got):
            body, relates = answer["body"], answer["relates_to"]
            # a thread's answer: its reply fallback is the message it answers (answers() took it
            # by its thread); a finished answer, wherever it is, echoes a message of its conversation
            wrong = conversation and not (
                relates.get("is_falling_back") is True
                and (relates.get("m.in_reply_to") or {}).get("event_id") == event_id
            )
            if "interrupted" not in body and conversation_of.get((room, echoed(body))) != conversation:
                wrong = True
            if wrong:
                figures["answers out of their thread"] += 1
                problems.append(
                    f"{where(room, conversation, name)}: the answer {body[-40:]!r} to {text!r} relates to {relates}"
                )
            if "interrupted" in body:
                figures["interrupted"] += 1
                if UNSURE in body:  # stopped as it was handed over: said so, never sent twice
                    figures["stopped as the prompt was handed over (said so)"] += 1
                elif not prompted[name][text]:
                    figures["interrupted before it reached the agent"] += 1
                    problems.append(f"{name}: {text!r} interrupted but never prompted")
            else:
                figures["finished"] += 1
                if echoed(body) != text:
                    figures["echoes wrong"] += 1
                    problems.append(f"{name}: answer {body[-40:]!r} in the place of {text!r}")
            finals = [i for i, shown in enumerate(answer["history"]) if is_final(shown)]
            if finals and any(shown != answer["history"][finals[0]] for shown in answer["history"][finals[0] :]):
                figures["finished answers edited afterwards"] += 1
                problems.append(f"{name}: a finished answer was edited afterwards: {answer['history']}")
    for name, counter in prompted.items():
        twice = {text: n for text, n in counter.items() if n > 1}
        figures["prompted twice"] += sum(n - 1 for n in twice.values())
        if twice:
            problems.append(f"{name} read these prompts more than once: {twice}")
    figures["seconds"] = round(time.monotonic() - started)
    figures["problems"] = problems
    return figures


async def test_restarts_at_random_moments_deliver_once_and_answer_once(tmp_path):
    figures = await run_scenario(tmp_path, RESTARTS, seed=20261205)
    problems = figures.pop("problems")
    record_figures("restarts", figures)
    assert not problems, "\n".join(problems) + f"\n{figures}"
    assert figures["undecryptable"] == 0, figures
