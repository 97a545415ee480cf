"""Which rooms to read back before a transaction, once the homeserver may have left one behind
(docs/reliability.md "Restarts": transaction order). Pure: events and times in, rooms out; the
bridge reads them back (bridge.py `_read_back_before`), tested in tests/unit/matrix/test_left_behind.py.

Synapse can store a transaction unsent at the end of a recovery and send it at its next failure
only, while the next ones go out at once: a transaction let through after a gap in its numbering
(appservice.TransactionOrder, `gap_at`) may have an earlier one missing. Its messages are older
than those of the transactions after it, and in the rooms already: a room with an owner's event
in a transaction is read back once after each such gap — from READ_BEFORE before the gap or
before those events, whichever is earlier — for HORIZON after the gap. A message left behind is
then taken before the ones after it in its room, and skipped when its own transaction comes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

READ_BEFORE = 120.0  # seconds before the gap (or the events) from which a room is read back
HORIZON = 600.0  # seconds after a gap during which a room's next owner event reads it back


def rooms_to_read(
    events: Sequence[dict], owners: Collection[str], gap_at: float | None, read_at: Mapping[str, float], now: float
) -> dict[str, int]:
    """room → the origin time (ms) to read it back from, for the rooms of the owners' events in
    `events` not read back (`read_at`, seconds) since the last gap let through (`gap_at`)."""
    if gap_at is None or now - gap_at > HORIZON:
        return {}
    rooms: dict[str, int] = {}
    for event in events:
        room_id, origin = event.get("room_id"), event.get("origin_server_ts")
        if not isinstance(room_id, str) or event.get("sender") not in owners:
            continue
        if read_at.get(room_id, float("-inf")) >= gap_at:
            continue  # read back since that gap: anything left behind before it was found then
        start = gap_at
        if isinstance(origin, int) and not isinstance(origin, bool):
            start = min(start, origin / 1000)  # the homeserver's clock and ours may differ
        since = int((start - READ_BEFORE) * 1000)
        rooms[room_id] = min(rooms.get(room_id, since), since)
    return rooms
