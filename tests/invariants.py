"""The exactly-once checks the outage tests share (a part of the homeserver or the database
away mid-answer, then back): how many prompts a scripted agent ended, and which edits came after
the one that finished an answer (there must be none).

Used by tests/unit/store/test_outage_mid_answer.py and tests/integration/scale (imported as
`invariants`: tests/ is on sys.path).
"""

from __future__ import annotations

import json
from pathlib import Path

from bridge.channels.base import stream

# an answer's status line while it is being written: waiting, thinking, writing, a tool at work
STATUS = ("⏳", "💭", "✍️", "🔧")


def prompts_ended(log: Path) -> int:
    """Prompts the scripted agent (`--log FILE`) has finished answering."""
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if json.loads(line).get("scripted") == "prompt ended")


def edits_after_final(events: list[dict], sender: str) -> list[str]:
    """Edits of `sender`'s messages that came after the edit (or message) that finished them."""
    finished: set[str] = set()
    late = []
    for event in events:
        if event.get("type") != "m.room.message" or event.get("sender") != sender:
            continue
        content = event.get("content") or {}
        relates = content.get("m.relates_to") or {}
        target, shown = event["event_id"], content
        if relates.get("rel_type") == "m.replace":
            target, shown = relates.get("event_id"), content.get("m.new_content") or {}
            if target in finished:
                late.append(shown.get("body", ""))
        if stream.LIVE not in shown and not shown.get("body", "").startswith(STATUS):
            finished.add(target)
    return late
