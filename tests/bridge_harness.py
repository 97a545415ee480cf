"""Running the real bridge against the session's Synapse, with scripted ACP agents.

    from bridge_harness import agent, start_bridge, answers_in

The bridge runs in the test's event loop (the same Bridge class `sidekicks run` uses) and
listens on the port the Synapse registration points at, so only one bridge at a time: the
`bridge_factory` fixture stops each bridge a test started.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

import config as configuration
from config import registration as registrations

SCRIPTED = Path(__file__).parent / "agents" / "scripted_agent.py"


def agent(*options: str, title: str | None = None, **extra: Any) -> dict:
    """An agents.<name> config entry running the scripted agent with `options`."""
    entry: dict[str, Any] = {"command": [sys.executable, str(SCRIPTED), *options]}
    if title:
        entry["title"] = title
    entry.update(extra)
    return entry


def write_config(hs, folder: Path, agents: dict[str, dict], **top: Any) -> Path:
    data = yaml.safe_load(hs.base_config_path.read_text())
    data["appservice"]["registration"] = str(hs.registration_path)
    data["agents"] = agents
    data.update(top)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class RunningBridge:
    def __init__(self, bridge, cfg):
        self.bridge = bridge
        self.config = cfg
        self.stopped = False

    @property
    def store(self):
        return self.bridge.store

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await self.bridge.stop()


async def start_bridge(hs, folder: Path, agents: dict[str, dict], data_dir: Path | None = None,
                       **top: Any) -> RunningBridge:
    from bridge.bridge import Bridge
    from bridge.cli import open_store

    path = write_config(hs, folder, agents, **top)
    cfg = configuration.load(path)
    cfg = dataclasses.replace(cfg, data_dir=data_dir or folder / "data")
    registration = registrations.read(cfg.registration_path)
    store, unavailable = open_store(cfg)
    bridge = Bridge(cfg, registration, store, history_unavailable=unavailable)
    await bridge.start()
    return RunningBridge(bridge, cfg)


def answers_in(events: list[dict], sender: str) -> list[dict]:
    """`sender`'s messages with their edits applied: [{event_id, body, html, edits}], oldest first."""
    messages: dict[str, dict] = {}
    order: list[str] = []
    for event in events:
        if event.get("type") != "m.room.message" or event.get("sender") != sender:
            continue
        content = event.get("content") or {}
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace" and "m.new_content" in content:
            target = messages.get(relates.get("event_id"))
            if target is not None:
                new = content["m.new_content"]
                target.update(body=new.get("body", ""), html=new.get("formatted_body"))
                target["edits"] += 1
                target["history"].append(new.get("body", ""))
            continue
        messages[event["event_id"]] = {"event_id": event["event_id"], "body": content.get("body", ""),
                                       "html": content.get("formatted_body"), "edits": 0,
                                       "msgtype": content.get("msgtype"),
                                       "history": [content.get("body", "")]}
        order.append(event["event_id"])
    return [messages[event_id] for event_id in order]
