"""Each member's session settings: `store.settings` (table sk_member_setting, schema.py).

* choices — what the owner chose (or the agent last switched to): {"mode": id | None,
  "model": id | None, "config": {option id: value}}; kept across sessions, applied again to
  every new or loaded session, after a restart or a slot eviction;
* usage (used / size tokens, cost and currency) and the session's title — about the current
  session: `new_session()` forgets them, and the snapshot, but keeps the choices;
* snapshot — what the agent's session offered (modes, options, models) as a JSON object, so
  that the bridge can list them while the agent is not running.

The store does not read choices or snapshots: they are plain JSON objects to it. A member
removed (or its channel deleted) takes its settings with it (ON DELETE CASCADE); a write for
someone who is not a member is ignored, like the member updates of members.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .core import Core, Part, operation
from .ids import now_ms
from .members import Members
from .schema import select

KINDS = ("mode", "model", "config")


@dataclass(frozen=True)
class MemberSettings:
    channel_id: str
    agent: str
    mode: str | None = None
    model: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    used: int | None = None
    size: int | None = None
    cost: float | None = None
    currency: str | None = None
    title: str | None = None
    snapshot: dict[str, Any] | None = None

    @property
    def choices(self) -> dict[str, Any]:
        return {"mode": self.mode, "model": self.model, "config": dict(self.config)}


def _choices(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        value = {}
    value = value if isinstance(value, dict) else {}
    config = value["config"] if isinstance(value.get("config"), dict) else {}
    return {
        "mode": value.get("mode") if isinstance(value.get("mode"), str) else None,
        "model": value.get("model") if isinstance(value.get("model"), str) else None,
        "config": {str(k): v for k, v in config.items() if isinstance(v, str)},
    }


def _snapshot(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


COLUMNS = ("choices", "snapshot", "used", "size", "cost", "currency", "title")


def _record(channel_id: str, agent: str, row: tuple | None) -> MemberSettings:
    if row is None:
        return MemberSettings(channel_id, agent)
    choices, snapshot, used, size, cost, currency, title = row
    picked = _choices(choices)
    return MemberSettings(
        channel_id,
        agent,
        picked["mode"],
        picked["model"],
        picked["config"],
        used,
        size,
        cost,
        currency,
        title,
        _snapshot(snapshot),
    )


class Settings(Part):
    """`store.settings`: every method runs as one store operation (serialised, StoreClosed
    after close, driver errors as StoreError)."""

    def __init__(self, core: Core, members: Members) -> None:
        super().__init__(core)
        self.members = members

    # --- reading ---------------------------------------------------------------------------
    @operation
    def get(self, channel_id: str, agent: str) -> MemberSettings | None:
        """The member's settings (defaults if none were written); None if not a member."""
        if not self._is_member(channel_id, agent):
            return None
        return _record(channel_id, agent, self._row(channel_id, agent))

    @operation
    def of_channel(self, channel_id: str) -> list[MemberSettings]:
        """Every member's settings, in join order."""
        S = self.core.models.MemberSetting
        query = S.select(S.agent, *(getattr(S, c) for c in COLUMNS)).where(S.channel_id == channel_id)
        rows = {row[0]: row[1:] for row in query.tuples()}
        return [
            _record(channel_id, member.agent, rows.get(member.agent)) for member in self.members.members(channel_id)
        ]

    # --- writing ---------------------------------------------------------------------------
    @operation
    def choose(self, channel_id: str, agent: str, kind: str, value: str | None, key: str | None = None) -> None:
        """Remember a choice: kind "mode" / "model", or "config" with the option's `key`;
        value None forgets it."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        if kind == "config" and not key:
            raise ValueError("a config choice needs the option's key")
        with self.core.db.atomic():
            row = self._row(channel_id, agent)
            choices = _choices(row[0] if row else None)
            if kind == "config":
                if value is None:
                    choices["config"].pop(key, None)
                else:
                    choices["config"][key] = value
            else:
                choices[kind] = value
            self._write(channel_id, agent, {"choices": json.dumps(choices, sort_keys=True)})

    def set_choices(self, channel_id: str, agent: str, choices: dict[str, Any]) -> None:
        """Replace all the choices ({"mode", "model", "config"}; missing keys: none)."""
        self._write(channel_id, agent, {"choices": json.dumps(_choices(json.dumps(choices)), sort_keys=True)})

    def set_usage(
        self, channel_id: str, agent: str, used: int, size: int, cost: float | None = None, currency: str | None = None
    ) -> None:
        self._write(channel_id, agent, {"used": int(used), "size": int(size), "cost": cost, "currency": currency})

    def set_title(self, channel_id: str, agent: str, title: str | None) -> None:
        self._write(channel_id, agent, {"title": title})

    def set_snapshot(self, channel_id: str, agent: str, snapshot: dict[str, Any] | None) -> None:
        self._write(channel_id, agent, {"snapshot": None if snapshot is None else json.dumps(snapshot, sort_keys=True)})

    def new_session(self, channel_id: str, agent: str) -> None:
        """The member has a new session: usage, title and snapshot go, the choices stay."""
        self._write(
            channel_id,
            agent,
            {"used": None, "size": None, "cost": None, "currency": None, "title": None, "snapshot": None},
        )

    def _is_member(self, channel_id: str, agent: str) -> bool:
        return bool(self.core.queries.member.rows(channel_id=channel_id, agent=agent))

    def _row(self, channel_id: str, agent: str) -> tuple | None:
        S = self.core.models.MemberSetting
        return select(S, COLUMNS).where((S.channel_id == channel_id) & (S.agent == agent)).tuples().first()

    @operation
    def _write(self, channel_id: str, agent: str, values: dict[str, Any]) -> None:
        S = self.core.models.MemberSetting
        with self.core.db.atomic():
            if not self._is_member(channel_id, agent):
                return  # not (or no longer) a member
            values = {**values, "updated": now_ms()}
            S.insert(channel_id=channel_id, agent=agent, **values).on_conflict(
                conflict_target=[S.channel_id, S.agent], update={getattr(S, k): v for k, v in values.items()}
            ).execute()
