"""Chat sessions of the local-model agent, one JSON file each.

A session file holds the conversation as chat messages::

    {"sessionId": "sess_…", "cwd": "/home/me", "created": 1764694800.0,
     "updated": 1764694900.0, "messages": [{"role": "user", "content": "…"}, …]}

Files are written atomically (temporary file + rename) with mode 0600 in a
0700 directory: they hold private conversations.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic_file import replacing

# Ids we create are "sess_" + 32 hex digits; loading accepts any id that is a
# safe file name, so a hand-copied session file still works.
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class SessionError(Exception):
    """A session cannot be found or read; the message is for people."""


def default_sessions_dir() -> Path:
    """$XDG_STATE_HOME/sidekicks/local-model/sessions (~/.local/state/... if unset)."""
    state = os.environ.get("XDG_STATE_HOME", "").strip()
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "sidekicks" / "local-model" / "sessions"


@dataclass
class Session:
    id: str
    cwd: str = ""
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    messages: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "sessionId": self.id,
            "cwd": self.cwd,
            "created": self.created,
            "updated": self.updated,
            "messages": self.messages,
        }


class SessionStore:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._open: dict[str, Session] = {}

    def create(self, cwd: str = "") -> Session:
        session = Session(id="sess_" + uuid.uuid4().hex, cwd=cwd)
        self._open[session.id] = session
        self.save(session)
        return session

    def get(self, session_id: str) -> Session:
        """An open session, or the one on disk; SessionError if neither."""
        session = self._open.get(session_id)
        if session is None:
            session = self._read(session_id)
            self._open[session_id] = session
        return session

    def save(self, session: Session) -> None:
        session.updated = time.time()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = json.dumps(session.to_json(), ensure_ascii=False, indent=1)
        with replacing(self._path(session.id)) as f:
            f.write(data)

    def _path(self, session_id: str) -> Path:
        return self.directory / f"{session_id}.json"

    def _read(self, session_id: str) -> Session:
        if not isinstance(session_id, str) or not _SAFE_ID.match(session_id):
            raise SessionError(f"invalid session id {session_id!r}")
        path = self._path(session_id)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SessionError(f"unknown session {session_id} (no file {path})") from None
        except (OSError, ValueError) as exc:
            raise SessionError(f"cannot read session file {path}: {exc}") from None
        messages = raw.get("messages") if isinstance(raw, dict) else None
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise SessionError(f"session file {path} is damaged (no valid messages list)")
        return Session(
            id=session_id,
            cwd=str(raw.get("cwd") or ""),
            created=float(raw.get("created") or 0.0),
            updated=float(raw.get("updated") or 0.0),
            messages=[{"role": m["role"], "content": m["content"]} for m in messages],
        )
