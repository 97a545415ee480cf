"""The owner as a person's client, in a process of its own: `python owner_proc.py HS_URL USER PASSWORD`.

A matrix-nio client (a device of its own) with a long-poll `/sync` loop (timeline limit 500).
Prints {"ready": true} once logged in and synced, then for each JSON line on stdin
{"room": ROOM_ID, "text": TEXT, "from": USER_ID} sends TEXT into the room (room_send: the
person's Enter) and answers one JSON line {"s": seconds} from just before room_send to the
`/sync` response holding the first m.room.message of USER_ID that comes after the sent event in
the room's timeline (edits of earlier messages do not count), or {"error": "..."}. With
"until": "text" in the request it waits instead for the first event of USER_ID (a message or an
edit of one, after the sent event) whose body shows answer text, not only a status line, and
adds "text_s" (that one), "t0" and "sent" (time.perf_counter() before room_send and when it
returned: CLOCK_MONOTONIC, comparable with the other processes' stamps). stdin closing ends it.
With "trace": true in the request the answer adds "syncs": each `/sync` response that came
between room_send and the answer, as [seconds after t0, what it held] (the events of each room
by type and sender, "edit" for an m.replace, the number of ephemeral, presence and to-device
events). SIDEKICKS_BENCH_OWNER_FILTER=all syncs without the filter below (every event type:
typing, receipts, presence…), to see what wakes the long-poll; it is not the measured filter.
Used by bench_latency.py and bench_first_token.py; the same client code times every side.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from nio import AsyncClient, AsyncClientConfig, LoginResponse, RoomSendResponse, SyncResponse

SYNC_FILTER = {
    "presence": {"types": []},
    "account_data": {"types": []},
    "room": {
        "ephemeral": {"types": []},
        "account_data": {"types": []},
        "state": {"lazy_load_members": True},
        "timeline": {"types": ["m.room.message"], "limit": 500},
    },
}
if os.environ.get("SIDEKICKS_BENCH_OWNER_FILTER") == "all":  # diagnostics only (see above)
    SYNC_FILTER = {"room": {"timeline": {"limit": 500}}}
ANSWER_TIMEOUT = 30.0


def sync_summary(response: SyncResponse) -> dict:
    """What one /sync response held: events per room (type, sender, edit), ephemeral, presence,
    to-device counts."""
    rooms: dict[str, list[str]] = {}
    ephemeral = 0
    for room_id, info in response.rooms.join.items():
        for event in info.timeline.events:
            source = getattr(event, "source", None) or {}
            content = source.get("content") or {}
            edit = (content.get("m.relates_to") or {}).get("rel_type") == "m.replace"
            body = (content.get("m.new_content") or content).get("body", "")
            rooms.setdefault(room_id, []).append(
                f"{source.get('type')} {source.get('sender')}{' edit' if edit else ''} {str(body)[:24]!r}"
            )
        for event in info.ephemeral:
            ephemeral += 1
            rooms.setdefault(room_id, []).append(f"ephemeral {type(event).__name__}")
    return {
        "rooms": rooms,
        "ephemeral": ephemeral,
        "presence": len(response.presence_events),
        "to_device": len(response.to_device_events),
        "device_lists": len(response.device_list.changed) + len(response.device_list.left),
    }


class Timelines:
    """Every m.room.message seen, per room, in timeline order: (seen_at, sender, event_id, is_edit, body);
    the body of an edit is its new content's."""

    def __init__(self) -> None:
        self.rooms: dict[str, list[tuple[float, str, str, bool, str]]] = {}
        self.changed = asyncio.Condition()
        self.syncs: list[tuple[float, dict]] = []  # (seen, sync_summary), while `tracing`
        self.tracing = False

    def add(self, seen: float, response: SyncResponse) -> None:
        if self.tracing:
            self.syncs.append((seen, sync_summary(response)))
        for room_id, info in response.rooms.join.items():
            record = self.rooms.setdefault(room_id, [])
            for event in info.timeline.events:
                source = getattr(event, "source", None) or {}
                if source.get("type") != "m.room.message":
                    continue
                content = source.get("content") or {}
                relates = content.get("m.relates_to") or {}
                body = (content.get("m.new_content") or content).get("body", "")
                record.append(
                    (
                        seen,
                        source.get("sender", ""),
                        source.get("event_id", ""),
                        relates.get("rel_type") == "m.replace",
                        body if isinstance(body, str) else "",
                    )
                )

    def answer_after(self, room_id: str, event_id: str, sender: str, text: bool = False) -> float | None:
        """When the first message of `sender` after `event_id` was seen; with `text`, the first
        message or edit of `sender` showing answer text."""
        record = self.rooms.get(room_id, [])
        for i, (_, _, eid, _, _) in enumerate(record):
            if eid == event_id:
                for seen, who, _, edit, body in record[i + 1 :]:
                    if who != sender:
                        continue
                    if text and shows_text(body):
                        return seen
                    if not text and not edit:
                        return seen
                return None
        return None


STATUS_PREFIXES = ("⏳", "💭", "✍️", "🔧")  # the bridge's status lines (bridge/channels/showing.py)


def shows_text(body: str) -> bool:
    """A message of an answer shows text: the status line (if any) is followed by some."""
    if body.startswith(STATUS_PREFIXES):
        return bool(body.partition("\n\n")[2].strip())
    return bool(body.strip()) and body != "…"


async def sync_loop(client: AsyncClient, timelines: Timelines) -> None:
    while True:
        response = await client.sync(timeout=30000, sync_filter=SYNC_FILTER)
        seen = time.perf_counter()
        if isinstance(response, SyncResponse):
            timelines.add(seen, response)
        else:
            await asyncio.sleep(0.1)
        async with timelines.changed:
            timelines.changed.notify_all()


async def traced_round(client: AsyncClient, timelines: Timelines, ask: dict) -> dict:
    """One round; with "trace", the /sync responses seen between room_send and the answer."""
    timelines.syncs.clear()
    timelines.tracing = bool(ask.get("trace"))
    answer = await one_round(client, timelines, ask["room"], ask["text"], ask["from"], ask.get("until") == "text")
    if timelines.tracing and "s" in answer:
        t0 = answer.pop("_t0")
        answer["t0"] = t0
        answer["syncs"] = [[round(seen - t0, 4), summary] for seen, summary in timelines.syncs if seen >= t0]
    answer.pop("_t0", None)
    timelines.tracing = False
    return answer


async def one_round(
    client: AsyncClient, timelines: Timelines, room: str, text: str, sender: str, until_text: bool = False
) -> dict:
    t0 = time.perf_counter()
    sent = await client.room_send(room, "m.room.message", {"msgtype": "m.text", "body": text})
    if not isinstance(sent, RoomSendResponse):
        return {"error": f"room_send: {sent}"}
    answered = time.perf_counter()
    deadline = t0 + ANSWER_TIMEOUT
    async with timelines.changed:
        while True:
            seen = timelines.answer_after(room, sent.event_id, sender)
            shown = timelines.answer_after(room, sent.event_id, sender, text=True) if until_text else seen
            if seen is not None and shown is not None:
                if not until_text:
                    return {"s": seen - t0, "_t0": t0}
                return {"s": seen - t0, "text_s": shown - t0, "t0": t0, "sent": answered, "_t0": t0}
            left = deadline - time.perf_counter()
            if left <= 0:
                return {"error": f"no answer from {sender} in {ANSWER_TIMEOUT:.0f} s"}
            try:
                await asyncio.wait_for(timelines.changed.wait(), left)
            except TimeoutError:
                pass


async def main(hs_url: str, user: str, password: str) -> None:
    client = AsyncClient(hs_url, user, config=AsyncClientConfig(encryption_enabled=False, store_sync_tokens=False))
    try:
        login = await client.login(password, device_name="bench owner")
        if not isinstance(login, LoginResponse):
            print(json.dumps({"error": f"login: {login}"}), flush=True)
            return
        first = await client.sync(timeout=0, sync_filter=SYNC_FILTER, full_state=True)
        if not isinstance(first, SyncResponse):
            print(json.dumps({"error": f"first sync: {first}"}), flush=True)
            return
        timelines = Timelines()
        syncing = asyncio.create_task(sync_loop(client, timelines))
        print(json.dumps({"ready": True}), flush=True)
        loop = asyncio.get_running_loop()
        try:
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    break
                ask = json.loads(line)
                while ask["room"] not in client.rooms:  # a room joined after the first sync
                    async with timelines.changed:
                        await timelines.changed.wait()
                answer = await traced_round(client, timelines, ask)
                print(json.dumps(answer), flush=True)
        finally:
            syncing.cancel()
            await asyncio.gather(syncing, return_exceptions=True)
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
