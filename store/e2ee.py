"""What the bridge's encryption keeps (bridge/e2ee/crypto.py): the encrypted events waiting for
their room key, and the rooms known to be encrypted — a row each (`sk_e2ee_pending`,
`sk_e2ee_room`), written and crossed out one at a time. Until migration step 8 both were JSON
lists in the key-value table, rewritten whole at every change (store/migrations.py).

The store does not read the events: an event is a JSON object to it, its ids opaque strings.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .ids import new_id, now_ms

if TYPE_CHECKING:
    from .store import Store


class E2ee:
    """`store.e2ee`: every method runs as one store operation (serialised, StoreClosed after
    close, driver errors as StoreError)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    # --- events waiting for their room key -----------------------------------------------------
    def wait(
        self, event_id: str, room_id: str, session_id: str, event: dict[str, Any], most: int | None = None
    ) -> None:
        """Keep `event` until its key (`session_id` in `room_id`) comes; kept once per event id.
        With `most`, only the newest `most` events are kept."""
        self._store._run(_wait, event_id, room_id, session_id, json.dumps(event), most)

    def waiting(self, room_id: str | None = None, session_id: str | None = None) -> list[dict[str, Any]]:
        """The events waiting (of one room, of one session in it, if given), oldest first."""
        return self._store._run(_waiting, room_id, session_id)

    def done(self, event_id: str) -> bool:
        """The event waits no longer (handled); False if it was not waiting."""
        return self._store._run(_done, event_id)

    # --- encrypted rooms -----------------------------------------------------------------------
    def mark_encrypted(self, room_id: str) -> None:
        """`room_id` is encrypted (for good: a room's encryption is never turned off)."""
        self._store._run(_mark_encrypted, room_id)

    def encrypted_rooms(self) -> list[str]:
        """The rooms known to be encrypted, sorted."""
        return self._store._run(_encrypted_rooms)


# --- the operations (run by Store._run, under its lock) ----------------------------------------


def _wait(store: Store, event_id: str, room_id: str, session_id: str, event: str, most: int | None) -> None:
    P = store._m.E2eePending
    with store._db.atomic():
        P.insert(
            id=new_id(), event_id=event_id, room_id=room_id, session_id=session_id, event=event, received=now_ms()
        ).on_conflict_ignore().execute()
        if most is not None:
            older = [row[0] for row in P.select(P.id).order_by(P.id.desc()).offset(max(0, most)).tuples()]
            if older:
                P.delete().where(P.id.in_(older)).execute()


def _waiting(store: Store, room_id: str | None, session_id: str | None) -> list[dict[str, Any]]:
    P = store._m.E2eePending
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


def _done(store: Store, event_id: str) -> bool:
    P = store._m.E2eePending
    return P.delete().where(P.event_id == event_id).execute() > 0


def _mark_encrypted(store: Store, room_id: str) -> None:
    R = store._m.E2eeRoom
    R.insert(room_id=room_id, marked=now_ms()).on_conflict_ignore().execute()


def _encrypted_rooms(store: Store) -> list[str]:
    R = store._m.E2eeRoom
    return [row[0] for row in R.select(R.room_id).order_by(R.room_id).tuples()]
