"""What the bridge's encryption keeps (bridge/e2ee/crypto.py): the encrypted events waiting for
their room key, and the rooms known to be encrypted — a row each (`sk_e2ee_pending`,
`sk_e2ee_room`), written and crossed out one at a time. Until migration step 8 both were JSON
lists in the key-value table, rewritten whole at every change (store/migrations.py).

The store does not read the events: an event is a JSON object to it, its ids opaque strings.
"""

from __future__ import annotations

import json
from typing import Any

from .core import Part, operation
from .ids import new_id, now_ms


class E2ee(Part):
    """`store.e2ee`: every method runs as one store operation (serialised, StoreClosed after
    close, driver errors as StoreError)."""

    # --- events waiting for their room key -----------------------------------------------------
    @operation
    def wait(
        self, event_id: str, room_id: str, session_id: str, event: dict[str, Any], most: int | None = None
    ) -> None:
        """Keep `event` until its key (`session_id` in `room_id`) comes; kept once per event id.
        With `most`, only the newest `most` events are kept."""
        P = self.core.models.E2eePending
        with self.core.db.atomic():
            P.insert(
                id=new_id(),
                event_id=event_id,
                room_id=room_id,
                session_id=session_id,
                event=json.dumps(event),
                received=now_ms(),
            ).on_conflict_ignore().execute()
            if most is not None:
                older = [row[0] for row in P.select(P.id).order_by(P.id.desc()).offset(max(0, most)).tuples()]
                if older:
                    P.delete().where(P.id.in_(older)).execute()

    @operation
    def waiting(self, room_id: str | None = None, session_id: str | None = None) -> list[dict[str, Any]]:
        """The events waiting (of one room, of one session in it, if given), oldest first."""
        P = self.core.models.E2eePending
        query = P.select(P.event)
        if room_id is not None:
            query = query.where(P.room_id == room_id)
        if session_id is not None:
            query = query.where(P.session_id == session_id)
        found = []
        for (text,) in query.order_by(P.id).tuples():
            try:
                event = json.loads(text)
            except ValueError:
                continue
            if isinstance(event, dict):
                found.append(event)
        return found

    @operation
    def done(self, event_id: str) -> bool:
        """The event waits no longer (handled); False if it was not waiting."""
        P = self.core.models.E2eePending
        return P.delete().where(P.event_id == event_id).execute() > 0

    # --- encrypted rooms -----------------------------------------------------------------------
    @operation
    def mark_encrypted(self, room_id: str) -> None:
        """`room_id` is encrypted (for good: a room's encryption is never turned off)."""
        R = self.core.models.E2eeRoom
        R.insert(room_id=room_id, marked=now_ms()).on_conflict_ignore().execute()

    @operation
    def encrypted_rooms(self) -> list[str]:
        """The rooms known to be encrypted, sorted."""
        R = self.core.models.E2eeRoom
        return [row[0] for row in R.select(R.room_id).order_by(R.room_id).tuples()]
