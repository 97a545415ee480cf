"""Answers that were never finished, repaired even after a crash (SPEC §9, ADR §5).

A streaming answer is not stored: only its Matrix message exists. So when an answer starts, its
message is written down in the store (a pending item of kind `answer`: event id → room and
agent), and crossed out when the turn ends. A turn cut by quitting keeps its item (its last edit
may not have landed); a `kill -9` keeps it too. At the next start every item left is edited to
say the answer was interrupted — unless it already says so, or the answer was stored after all —
then forgotten. The edit carries a transaction id derived from the event id, so repeating it after
another crash never posts it twice.

Owner messages are written down the same way (kind `prompt`) from the moment they are taken until
every turn they asked for is over. At the next start each one left is answered by the agents
whose answer had not begun: a `kill -9` loses no message, an answer that had begun is shown as
interrupted (not begun again), and one that was stored is not given twice.

An answer has begun once its `session/prompt` is written to the agent: its item says so
(`sent`), written right after the write (before anything the agent answers is read). A turn cut
before that — waiting for its turn, for the agent to start, for its session — was never begun:
at the next start it is run again, in order, once, and its placeholder message is reused (sent
again with the same transaction id, the homeserver gives back the same event), so the owner sees
one answer where the "getting ready" line was. A kill in the instant between the write and the
note runs the turn again too: the agent then reads that message twice, the owner still sees one
answer.

Each item is a row of its own, so writing one down costs the same with one message waiting as
with thousands (a backlog after a restart).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import quote

from store import StoreError

from .stream import message_content

if TYPE_CHECKING:
    from ..bridge import Bridge
    from .turns import TurnRun

log = logging.getLogger(__name__)

ANSWERS = "answer"   # pending items: answer messages in progress, event id (or txn:…) → where
PROMPTS = "prompt"   # pending items: owner messages taken, event id → room and agents done
# before pending items, each kind was one JSON value; a store written then is carried over once
LEGACY = {ANSWERS: "answers/in-progress", PROMPTS: "prompts/pending"}
TXN = "txn:"  # an entry for a placeholder whose send had not answered yet
INTERRUPTED = "⚠️ interrupted: the bridge stopped before this answer was finished"
MARK = "⚠️ interrupted"
STATUS_PREFIXES = ("⏳", "💭", "✍️", "🔧")


def _q(value: str) -> str:
    return quote(value, safe="")


def _unsent(where) -> bool:
    """An answer item whose prompt was never written to the agent (items of older runs, without
    a transaction id, count as begun)."""
    return (isinstance(where, dict) and where.get("sent") is False and isinstance(where.get("txn"), str)
            and isinstance(where.get("prompt"), str) and isinstance(where.get("agent"), str))


def shown_text(body: str) -> str:
    """The answer text of a streamed message body, without its status line."""
    head, sep, rest = body.partition("\n\n")
    if head.startswith(STATUS_PREFIXES):
        return rest if sep else ""
    return "" if body == "…" else body


def interrupted_text(body: str) -> str:
    """The text shown so far, as it was (up to its last character), then the mark."""
    text = shown_text(body).rstrip("\n")
    return f"{text}\n\n{INTERRUPTED}" if text.strip() else INTERRUPTED


class Recovery:
    def __init__(self, bridge: "Bridge"):
        self.bridge = bridge
        # (prompt event id, agent) whose answer a previous run began: shown as interrupted or
        # stored, never begun again (ADR §5: an interrupted answer is lost, not redone)
        self.started: set[tuple[str, str]] = set()
        # (prompt event id, agent) → (item key, placeholder transaction id) of a turn the last
        # run never started: run again, its placeholder reused
        self.unstarted: dict[tuple[str, str], tuple[str, str]] = {}
        self.rerun = 0  # how many such turns this start found

    # ---- bookkeeping, called by turns.run_turn ----------------------------------------------

    @staticmethod
    def _where(run: "TurnRun") -> dict:
        return {"room": run.portal.room_id, "agent": run.agent_name, "prompt": run.prompt_event_id,
                "txn": run.answer.placeholder_txn, "sent": run.prompt_sent}

    def adopt(self, run: "TurnRun") -> None:
        """Before the placeholder is posted: a turn the last run never started takes its
        placeholder (and its item) over."""
        found = self.unstarted.pop((run.prompt_event_id or "", run.agent_name), None)
        if found is not None:
            run.answer.placeholder_txn = found[1]
            run.answer.reused = True

    def prompt_sent(self, run: "TurnRun") -> None:
        """`session/prompt` is written to the agent: from now on the answer has begun, and a
        stop marks it interrupted instead of running it again. Called with no await since the
        write, so nothing the agent sent back can have been shown before it."""
        run.prompt_sent = True
        keys = run.answer.event_ids or [TXN + run.answer.placeholder_txn]
        try:
            self.bridge.store.update_pending(ANSWERS, put={key: self._where(run) for key in keys})
        except StoreError:
            log.warning("could not record that the answer in %s has begun", run.portal.room_id)

    def posting(self, run: "TurnRun") -> None:
        """The placeholder is about to be sent: its transaction id stands in for its event id."""
        try:
            self.bridge.store.update_pending(ANSWERS, put={TXN + run.answer.placeholder_txn: {
                **self._where(run), "body": f"⏳ {run.answer.title} is getting ready…"}})
        except StoreError:
            log.warning("could not record the answer in progress in %s", run.portal.room_id)

    def begin(self, run: "TurnRun") -> None:
        """An answer's first message is posted: write it down until the turn ends."""
        try:
            self.bridge.store.update_pending(
                ANSWERS, put={event_id: self._where(run) for event_id in run.answer.event_ids},
                drop=[TXN + run.answer.placeholder_txn])
        except StoreError:
            log.warning("could not record the answer in progress in %s", run.portal.room_id)

    def end(self, run: "TurnRun") -> None:
        """The turn is over. Cut by quitting (the task is being cancelled), or its answer could
        not be finished (the homeserver refused it): keep the item, with every message of the
        answer, for the next start to mark interrupted (and not answer again)."""
        task = asyncio.current_task()
        if (task is not None and task.cancelling()) or not run.answer.finished:
            try:
                self.bridge.store.update_pending(
                    ANSWERS, put={event_id: self._where(run) for event_id in run.answer.event_ids})
            except StoreError:  # the item stays as it was: the next start repairs it
                log.info("answer in %s left for the next start to check", run.portal.room_id)
            return
        store, prompt, agent = self.bridge.store, run.prompt_event_id, run.agent_name
        drop = [TXN + run.answer.placeholder_txn, *run.answer.event_ids]

        def answered() -> None:  # in this order: a crash between the two never answers it twice
            self._answered(prompt, agent)
            store.update_pending(ANSWERS, drop=drop)
        self.bridge.dispatcher.outage.later(f"the end of the answer in {run.portal.room_id}", answered)

    # ---- owner messages not answered yet ------------------------------------------------------

    def prompt_taken(self, event_id: str, room_id: str) -> None:
        """Before the message is stored: a crash from here on leaves a trace."""
        self.bridge.store.update_pending(PROMPTS, put={event_id: {"room": room_id, "done": []}})

    def _answered(self, prompt_event_id: str | None, agent: str) -> None:
        """`agent` is done with this message; written before its in-progress item goes, so
        that a crash between the two never makes the next start answer it again."""
        entry = self.bridge.store.pending_item(PROMPTS, prompt_event_id or "")
        if entry is not None:
            done = entry.get("done") if isinstance(entry.get("done"), list) else []
            if agent not in done:
                self.bridge.store.update_pending(PROMPTS, put={prompt_event_id: {**entry, "done": [*done, agent]}})

    def prompt_done(self, event_id: str) -> None:
        """Every turn of this message is over (written once the database takes it)."""
        def done() -> None:
            self.bridge.store.update_pending(PROMPTS, drop=[event_id])
            for prompt, agent in [k for k in self.unstarted if k[0] == event_id]:
                # its message was answered without this agent (routed elsewhere this time):
                # the placeholder it left says so at the next start (nothing of it had begun)
                self.unstarted.pop((prompt, agent))
        self.bridge.dispatcher.outage.later(f"the end of message {event_id}", done)

    def _migrate(self) -> None:
        """Carry the JSON values of an older store over to pending items, once."""
        store = self.bridge.store
        for kind, key in LEGACY.items():
            raw = store.get_value(key)
            if raw is None:
                continue
            try:
                found = json.loads(raw)
            except ValueError:
                found = {}
            if isinstance(found, dict):
                store.update_pending(kind, put={k: v for k, v in found.items() if isinstance(v, dict)})
            store.delete_value(key)

    def resume(self) -> int:
        """Queue again every owner message a previous run took but did not finish answering."""
        from .portal import Incoming

        resumed = []
        for event_id, entry in self.bridge.store.pending(PROMPTS).items():
            if not isinstance(entry.get("room"), str):
                self.prompt_done(event_id)
                continue
            message = self.bridge.store.message_by_event(event_id)
            portal = self.bridge.portal_for(entry["room"])
            if message is None or portal is None:
                # not stored (the homeserver delivers it again) or the channel is gone
                self.prompt_done(event_id)
                continue
            begun = frozenset(agent for prompt, agent in self.started if prompt == event_id)
            begun |= frozenset(a for a in entry.get("done", []) if isinstance(a, str))
            resumed.append((message.id, portal, Incoming(message.id, event_id, message.text,
                                                         resumed=True, skip_agents=begun)))
        for _, portal, incoming in sorted(resumed, key=lambda item: item[0]):
            portal.submit(incoming)
        return len(resumed)

    # ---- at start -----------------------------------------------------------------------------

    async def repair(self) -> int:
        """Mark every answer a previous run left unfinished as interrupted; returns how many."""
        self._migrate()
        entries = self.bridge.store.pending(ANSWERS)
        repaired = 0
        for where in entries.values():
            if isinstance(where, dict) and isinstance(where.get("prompt"), str) and not _unsent(where):
                self.started.add((where["prompt"], where.get("agent")))
        resumable = self._resumable()
        for key, where in list(entries.items()):
            if _unsent(where) and where["prompt"] in resumable and (where["prompt"], where.get("agent")) \
                    not in self.started and where.get("agent") in self.bridge.config.agents:
                # never begun, and its message will be answered: the new turn takes it over
                # (the item stays until then, so another stop before it still finds it)
                self.unstarted.setdefault((where["prompt"], where["agent"]), (key, where["txn"]))
                del entries[key]
        self.rerun = len(self.unstarted)
        for key, where in entries.items():
            event_id = key
            try:
                if event_id.startswith(TXN):
                    event_id = await self._event_of(event_id[len(TXN):], where)
                done = await self._repair_one(event_id, where) if event_id else False
            except Exception:
                log.exception("could not mark %s as interrupted; trying again at the next start", event_id)
                continue
            repaired += done
            if isinstance(where, dict) and isinstance(where.get("prompt"), str) and isinstance(where.get("agent"), str):
                # the answer had begun: written into its message's record before the item goes,
                # so a stop before that message is resumed never makes a later start begin it again
                self._answered(where["prompt"], where["agent"])
            self.bridge.store.update_pending(ANSWERS, drop=[key])
        return repaired

    def _resumable(self) -> set[str]:
        """The owner messages `resume` will queue again (those it would forget are not)."""
        store = self.bridge.store
        return {event_id for event_id, entry in store.pending(PROMPTS).items()
                if isinstance(entry.get("room"), str) and store.message_by_event(event_id) is not None
                and self.bridge.portal_for(entry["room"]) is not None}

    async def _event_of(self, txn: str, where: dict) -> str | None:
        """The event a placeholder send with `txn` made. Sending it again with the same
        transaction id returns the first one's event id (or, if the first never got there,
        posts it now — then it is marked interrupted like the others)."""
        room_id, agent = where.get("room"), where.get("agent")
        if not isinstance(room_id, str) or agent not in self.bridge.config.agents:
            return None
        puppet = await self.bridge.puppet(agent)
        return await puppet.intent.send(room_id, {"msgtype": "m.text", "body": str(where.get("body") or "⏳")},
                                        txn_id=txn)

    async def _repair_one(self, event_id: str, where: dict) -> bool:
        room_id, agent = where.get("room"), where.get("agent")
        if not isinstance(room_id, str) or agent not in self.bridge.config.agents:
            return False
        if self.bridge.store.message_by_event(event_id) is not None:
            return False  # it was finished and stored after all
        puppet = await self.bridge.puppet(agent)
        body = await self._latest_body(puppet.intent, room_id, event_id)
        if body is None or MARK in body:
            return False  # gone, or the graceful stop already said so
        txn = "sk-interrupted-" + hashlib.sha256(event_id.encode()).hexdigest()[:32]
        await puppet.intent.edit(room_id, event_id, message_content(interrupted_text(body), None), txn_id=txn)
        log.info("marked answer %s in %s as interrupted", event_id, room_id)
        return True

    @staticmethod
    async def _latest_body(intent, room_id: str, event_id: str) -> str | None:
        """The body shown now: the newest edit's, else the original's. None if the event is gone."""
        status, reply = await intent.request(
            "GET", f"/_matrix/client/v1/rooms/{_q(room_id)}/relations/{_q(event_id)}/m.replace"
                   f"?dir=b&limit=50")
        if status == 200:
            # dir=b: newest first
            edits = [e for e in reply.get("chunk") or [] if e.get("sender") == intent.user_id]
            if edits:
                new = (edits[0].get("content") or {}).get("m.new_content") or {}
                if isinstance(new.get("body"), str):
                    return new["body"]
        status, reply = await intent.request(
            "GET", f"/_matrix/client/v3/rooms/{_q(room_id)}/event/{_q(event_id)}")
        if status in (403, 404):
            return None
        if status != 200:
            raise RuntimeError(f"reading {event_id}: {status} {reply.get('error', reply)}")
        body = (reply.get("content") or {}).get("body")
        return body if isinstance(body, str) else ""
