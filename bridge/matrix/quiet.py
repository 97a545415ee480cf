"""Which rooms to read back when the homeserver has been quiet for a while after some activity
(docs/outages.md "A message the sender never hands on"). Pure: transactions' rooms and times
in, rooms out; the bridge reads them back (bridge.py `_watch_quiet`), tested in
tests/unit/matrix/test_quiet.py.

Synapse's appservice sender (a worker of its own, or the main process) takes the events it will
send from the event stream only when told of a new event. Killed right after an event was
written, before it took it, the sender started again does not send that event until some later
event, anywhere on the homeserver, wakes it: on a personal homeserver that can be hours, and the
homeserver answers the bridge all along, so nothing else tells the bridge. The owner writes in
rooms where a conversation is going on: a room with an event in a transaction is "active" for
ACTIVE seconds after it, and while the homeserver sends no transaction for QUIET seconds, the
active rooms are read back every QUIET seconds from READ_BEFORE before the last transaction. A
message the sender left behind in such a room is found within QUIET seconds and a read. An idle
bridge (no room active) reads nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

QUIET = 10.0  # seconds without a transaction before the active rooms are read back (and between reads)
ACTIVE = 300.0  # seconds after a room's last event in a transaction during which it is read back
READ_BEFORE = 60.0  # seconds before the last transaction from which a room is read (clocks differ)


class Quiet:
    """The rooms recently active and when the homeserver last sent a transaction."""

    def __init__(self) -> None:
        self.active: dict[str, float] = {}  # room → when an event of it last came
        self.last_transaction: float | None = None
        self.read_at: dict[str, float] = {}  # room → when it was last read back for quiet

    def came(self, rooms: Iterable[str], now: float) -> None:
        """A transaction came, with events in `rooms`."""
        self.last_transaction = now
        for room_id in rooms:
            self.active[room_id] = now
            self.read_at.pop(room_id, None)

    def next_check(self, now: float) -> float | None:
        """Seconds until rooms may be due (0: now); None when no room is active (idle)."""
        self._forget(now)
        if not self.active or self.last_transaction is None:
            return None
        quiet_at = self.last_transaction + QUIET
        due = [max(quiet_at, self.read_at.get(room_id, quiet_at - QUIET) + QUIET) for room_id in self.active]
        return max(0.0, min(due) - now)

    def due(self, now: float) -> dict[str, int]:
        """room → the origin time (ms) to read it back from, for the active rooms due now."""
        if self.next_check(now) != 0.0 or self.last_transaction is None:
            return {}
        since = int((self.last_transaction - READ_BEFORE) * 1000)
        return {
            room_id: since
            for room_id in self.active
            if now - self.read_at.get(room_id, float("-inf")) >= QUIET and now - self.last_transaction >= QUIET
        }

    def read(self, rooms: Iterable[str], now: float) -> None:
        """These rooms were read back at `now`."""
        for room_id in rooms:
            self.read_at[room_id] = now

    def _forget(self, now: float) -> None:
        for room_id in [r for r, at in self.active.items() if now - at > ACTIVE]:
            del self.active[room_id]
            self.read_at.pop(room_id, None)
