"""The application-service registration (SPEC §5): the file the homeserver and the bridge share.

Tokens are random (secrets.token_urlsafe) and the file is written 0600. Writing it again keeps
the existing tokens, so a homeserver that already loaded it keeps working.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from .model import Config
from .paths import write_private


@dataclass(frozen=True)
class Registration:
    id: str
    url: str
    as_token: str
    hs_token: str
    sender_localpart: str
    puppet_regex: str

    def to_yaml(self) -> str:
        body = {
            "id": self.id,
            "url": self.url,
            "as_token": self.as_token,
            "hs_token": self.hs_token,
            "sender_localpart": self.sender_localpart,
            "namespaces": {
                "users": [{"exclusive": True, "regex": self.puppet_regex}],
                "aliases": [],
                "rooms": [],
            },
            "rate_limited": False,
            "receive_ephemeral": True,
        }
        return yaml.safe_dump(body, sort_keys=False)


def puppet_regex(config: Config) -> str:
    return f"@{re.escape(config.puppet_prefix)}.*:{re.escape(config.domain)}"


def build(config: Config, existing: Registration | None = None) -> Registration:
    return Registration(
        id=config.appservice_id,
        url=config.appservice_url,
        as_token=existing.as_token if existing else secrets.token_urlsafe(32),
        hs_token=existing.hs_token if existing else secrets.token_urlsafe(32),
        sender_localpart=config.bot,
        puppet_regex=puppet_regex(config),
    )


def read(path: Path) -> Registration | None:
    """The registration at `path`, or None when there is none yet."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    users = ((data or {}).get("namespaces") or {}).get("users") or [{}]
    return Registration(
        id=str(data["id"]), url=str(data.get("url") or ""), as_token=str(data["as_token"]),
        hs_token=str(data["hs_token"]), sender_localpart=str(data["sender_localpart"]),
        puppet_regex=str(users[0].get("regex", "")),
    )


def ensure(config: Config, path: Path | None = None) -> Registration:
    """Write the registration for `config` (keeping existing tokens) and return it."""
    path = Path(path or config.registration_path)
    registration = build(config, read(path))
    write_private(path, registration.to_yaml())
    return registration
