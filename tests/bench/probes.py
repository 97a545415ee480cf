"""Timing probes wrapped around the in-process bridge, from outside (bridge/ is not edited).

Installed once, before the Bridge is constructed (the appservice routes bind their handler at
construction). Every stamp is time.perf_counter(), the same clock as the owner's client.

    txn_entry[token]      AppserviceServer.transaction entered for the event carrying `token`
    prompt_written[token] the session/prompt carrying `token` written and drained to the agent
    answers               one record per bridge Answer: room, sends, first part, stop, finish
"""

from __future__ import annotations

import contextvars
import re
import time

from acp import client as acp_client
from acp import rpc as acp_rpc
from bridge import bridge as bridge_module
from bridge.channels.base import stream
from bridge.channels.turns import portal as portal_module
from bridge.matrix import appservice, dispatch
from store import offloop

now = time.perf_counter
TOKEN = re.compile(r"bench-[a-z0-9-]+")

txn_entry: dict[str, float] = {}
prompt_written: dict[str, float] = {}
answers: list[dict] = []
stops: list[float] = []
phases: dict[str, list[float]] = {}  # awaited steps between transaction and prompt, durations
_txn_t0: contextvars.ContextVar[float | None] = contextvars.ContextVar("bench_txn_t0", default=None)
_last_part = [0.0]
_installed = [False]


def reset() -> None:
    txn_entry.clear()
    prompt_written.clear()
    answers.clear()
    stops.clear()
    phases.clear()


def install() -> None:
    if _installed[0]:
        return
    _installed[0] = True

    original_transaction = appservice.AppserviceServer.transaction

    async def transaction(self, request):
        _txn_t0.set(now())
        return await original_transaction(self, request)

    appservice.AppserviceServer.transaction = transaction

    original_handle_event = dispatch.Dispatcher.event

    async def handle_event(self, event):
        t0 = _txn_t0.get()
        body = (event.get("content") or {}).get("body")
        if t0 is not None and event.get("type") == "m.room.message" and isinstance(body, str):
            for token in TOKEN.findall(body):
                txn_entry.setdefault(token, t0)
        return await original_handle_event(self, event)

    dispatch.Dispatcher.event = handle_event

    original_send = acp_rpc.Peer._send

    async def peer_send(self, message, *args, **kwargs):
        await original_send(self, message, *args, **kwargs)
        if message.get("method") == "session/prompt":
            t = now()
            text = "".join(b.get("text", "") for b in message["params"]["prompt"])
            tokens = TOKEN.findall(text)
            if tokens:
                prompt_written.setdefault(tokens[-1], t)

    acp_rpc.Peer._send = peer_send

    original_notification = acp_client.Agent._on_notification

    async def on_notification(self, method, params):
        if method == "session/update":
            _last_part[0] = now()
        return await original_notification(self, method, params)

    acp_client.Agent._on_notification = on_notification

    original_prompt = acp_client.Agent.prompt

    async def prompt(self, *args, **kwargs):
        try:
            return await original_prompt(self, *args, **kwargs)
        finally:
            stops.append(now())
            # the Answer of this turn is the newest one still streaming
            for record in reversed(answers):
                if record["stop"] is None and record["finish_start"] is None:
                    record["stop"] = stops[-1]
                    break

    acp_client.Agent.prompt = prompt

    def timed(owner, name, label):
        original = getattr(owner, name)

        async def wrapper(*args, **kwargs):
            t = now()
            try:
                return await original(*args, **kwargs)
            finally:
                phases.setdefault(label, []).append(now() - t)

        setattr(owner, name, wrapper)

    # awaited before the prompt; the first message and the read receipt go out beside it
    timed(portal_module.Portal, "session_for", "Portal.session_for")
    timed(portal_module.Portal, "route", "Portal.route")
    timed(bridge_module.Bridge, "puppet", "Bridge.puppet")
    timed(dispatch.Dispatcher, "event", "Dispatcher.event (whole event)")

    # every store call the bridge awaits: queued on the database thread, run, answered
    original_run = offloop.DatabaseThread.run

    def run(self, fn):
        t = now()
        future = original_run(self, fn)
        future.add_done_callback(lambda _: phases.setdefault("database call", []).append(now() - t))
        return future

    offloop.DatabaseThread.run = run

    Answer = stream.Answer
    original_init = Answer.__init__

    def init(self, intent, room_id, title, *args, **kwargs):
        original_init(self, intent, room_id, title, *args, **kwargs)
        self._bench = {
            "room": room_id,
            "created": now(),
            "first_part": None,
            "first_part_send": None,
            "sends": [],
            "stop": None,
            "finish_start": None,
            "finish_end": None,
            "chars": 0,
        }
        answers.append(self._bench)

    Answer.__init__ = init

    original_append = Answer.append

    def append(self, chunk):
        record = self._bench
        if chunk and record["first_part"] is None:
            record["first_part"] = _last_part[0] or now()
        record["chars"] += len(chunk or "")
        return original_append(self, chunk)

    Answer.append = append

    original_answer_send = Answer._send

    async def answer_send(self, content, *args, **kwargs):
        record = self._bench
        t = now()
        if record["first_part"] is not None and record["first_part_send"] is None:
            record["first_part_send"] = t
        result = await original_answer_send(self, content, *args, **kwargs)
        record["sends"].append((t, now(), False, len(self.event_ids)))  # a new message
        return result

    Answer._send = answer_send

    original_answer_replace = Answer._replace

    async def answer_replace(self, event_id, new, *args, **kwargs):
        record = self._bench
        t = now()
        if record["first_part"] is not None and record["first_part_send"] is None:
            record["first_part_send"] = t
        result = await original_answer_replace(self, event_id, new, *args, **kwargs)
        record["sends"].append((t, now(), True, len(self.event_ids)))
        return result

    Answer._replace = answer_replace

    original_finish = Answer.finish

    async def finish(self, footer=None, *args, **kwargs):
        self._bench["finish_start"] = now()
        try:
            return await original_finish(self, footer, *args, **kwargs)
        finally:
            self._bench["finish_end"] = now()

    Answer.finish = finish
