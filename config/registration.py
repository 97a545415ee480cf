"""The application-service registration (docs/architecture.md "The Matrix side"): the file the
homeserver and the bridge share.

Tokens are random (secrets.token_urlsafe) and the file is written 0600. Writing it again keeps
the existing tokens, so a homeserver that already loaded it keeps working.

Several people on one homeserver (docs/architecture.md "Beyond one machine") each have a
registration; Synapse refuses two with the same id, and a user in two exclusive namespaces cannot be
registered by either appservice ("This user ID is reserved by an application service"), and an
appservice receives the events of every user its namespace matches. So before a registration is
written, it is compared with the other registrations the homeserver loads, as far as they can be
read on this machine (`others`): the embedded homeserver's homeserver.yaml, or the file named by
`homeserver.config`. An external homeserver's list cannot be known from here; its admin has to keep
the prefixes apart.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from .loader import ConfigError
from .model import Config
from .paths import user_config_root, write_private


@dataclass(frozen=True)
class Registration:
    id: str
    url: str
    as_token: str
    hs_token: str
    sender_localpart: str
    puppet_regex: str
    # the aliases its users may make (`!new` gives a channel `#name:domain` when free), shared
    # with anyone: Synapse refuses an appservice user an alias outside its namespaces
    alias_regex: str = ""

    def to_yaml(self) -> str:
        body = {
            "id": self.id,
            "url": self.url,
            "as_token": self.as_token,
            "hs_token": self.hs_token,
            "sender_localpart": self.sender_localpart,
            "namespaces": {
                "users": [{"exclusive": True, "regex": self.puppet_regex}],
                "aliases": [{"exclusive": False, "regex": self.alias_regex}] if self.alias_regex else [],
                "rooms": [],
            },
            "rate_limited": False,
            "receive_ephemeral": True,
            # the identities' crypto traffic in transactions (the bot has no /sync in Synapse):
            # to-device messages (MSC2409; Synapse reads the unstable name for them), one-time-key
            # counts, unused fallback keys and device-list changes (MSC3202). A homeserver sends
            # them only with its experimental features on (bridge/local/homeserver.py does)
            "de.sorunome.msc2409.push_ephemeral": True,
            "org.matrix.msc3202": True,
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
        alias_regex=f"#.*:{re.escape(config.domain)}",
    )


def read(path: Path) -> Registration | None:
    """The registration at `path`, or None when there is none yet."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    users = ((data or {}).get("namespaces") or {}).get("users") or [{}]
    aliases = ((data or {}).get("namespaces") or {}).get("aliases") or [{}]
    return Registration(
        id=str(data["id"]),
        url=str(data.get("url") or ""),
        as_token=str(data["as_token"]),
        hs_token=str(data["hs_token"]),
        sender_localpart=str(data["sender_localpart"]),
        puppet_regex=str(users[0].get("regex", "")),
        alias_regex=str(aliases[0].get("regex", "")),
    )


def ensure(config: Config, path: Path | None = None, others: list[Path] | None = None) -> Registration:
    """Write the registration for `config` (keeping existing tokens) and return it.

    Raises ConfigError (one line per clash) when another registration of the same homeserver
    (`others`, by default `homeserver_registrations(config)`) claims the same id or users.
    """
    path = Path(path or config.registration_path)
    registration = build(config, read(path))
    check(config, registration, others, own=[path, config.registration_path])
    write_private(path, registration.to_yaml())
    return registration


# -- several registrations on one homeserver ------------------------------------------------

_META = set(".^$*+?{}[]|()")
_QUANTIFIERS = set("*+?{")


def literal_prefix(regex: str) -> tuple[str, bool]:
    """The text every match of `regex` starts with, and whether that text is the whole regex.

    `@sk_.*:localhost` -> ("@sk_", False); `@sk\\-bob_.*:x` -> ("@sk-bob_", False);
    `@bot:localhost` -> ("@bot:localhost", True). Conservative: it stops at the first thing
    that is not a plain character.
    """
    chars: list[str] = []
    i = 0
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":
            if i + 1 < len(regex) and not regex[i + 1].isalnum():
                ch, step = regex[i + 1], 2
            else:
                return "".join(chars), False  # \d, \w, ...: a class, not a character
        elif ch in _META:
            return "".join(chars), False
        else:
            step = 1
        if i + step < len(regex) and regex[i + step] in _QUANTIFIERS:
            return "".join(chars), False  # `x?`, `x*`: that character may be missing
        chars.append(ch)
        i += step
    return "".join(chars), True


def _overlap(mine: str, theirs: str) -> bool:
    """Can some user id match both namespace regexes? (Never says no when the answer is yes.)"""
    a, a_whole = literal_prefix(mine)
    b, b_whole = literal_prefix(theirs)
    if a_whole:
        return _matches(theirs, a)
    if b_whole:
        return _matches(mine, b)
    return a.startswith(b) or b.startswith(a)


def _matches(regex: str, user_id: str) -> bool:
    try:
        return re.fullmatch(regex, user_id) is not None
    except re.error:
        return False


def _namespaces(registration: Registration) -> list[str]:
    return [registration.puppet_regex] if registration.puppet_regex else []


def _read_any(path: Path) -> tuple[Registration | None, list[str]]:
    """Any appservice's registration (not only ours): (id, tokens, sender) and all user regexes."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    users = (data.get("namespaces") or {}).get("users") or []
    regexes = [str(u["regex"]) for u in users if isinstance(u, dict) and u.get("regex")]
    return Registration(
        id=str(data.get("id", "")),
        url=str(data.get("url") or ""),
        as_token=str(data.get("as_token", "")),
        hs_token=str(data.get("hs_token", "")),
        sender_localpart=str(data.get("sender_localpart", "")),
        puppet_regex=regexes[0] if regexes else "",
    ), regexes


def conflicts(config: Config, mine: Registration, others: list[Path]) -> list[str]:
    """One line per way `mine` clashes with a registration in `others`."""
    label = str(config.path)
    bot = f"@{mine.sender_localpart}:{config.domain}"
    problems = []
    for path in others:
        try:
            theirs, regexes = _read_any(path)
        except (OSError, yaml.YAMLError, AttributeError):
            continue  # not ours to read (another person's file) or not a registration
        where = f"{path} (appservice {theirs.id!r})"
        their_bot = f"@{theirs.sender_localpart}:{config.domain}"
        if theirs.id == mine.id:
            problems.append(
                f"{label}: appservice.id: {mine.id!r} is already used by {where}; "
                "each bridge on a homeserver needs its own id"
            )
        for regex in regexes:
            if _overlap(mine.puppet_regex, regex):
                problems.append(
                    f"{label}: appservice.puppet_prefix: {config.puppet_prefix!r} claims users that "
                    f"{where} already claims ({regex}); Synapse lets one appservice own a user, so "
                    "choose a prefix that neither starts nor is started by the other "
                    f"(e.g. {suggest_prefix(config.owners[0] if config.owners else 'me')!r})"
                )
                break
        if bot == their_bot or any(_matches(regex, bot) for regex in regexes):
            problems.append(f"{label}: appservice.bot: {bot} is already claimed by {where}; choose another bot name")
        if _matches(mine.puppet_regex, their_bot) and bot != their_bot:
            problems.append(
                f"{label}: appservice.puppet_prefix: {config.puppet_prefix!r} would claim "
                f"the bot {their_bot} of {where}; choose another prefix"
            )
    return problems


def suggest_prefix(owner: str) -> str:
    """A puppet prefix for a second person: `sk-<name>_`, outside the default `sk_` namespace."""
    name = owner.lstrip("@").split(":", 1)[0]
    name = re.sub(r"[^a-z0-9.=\-]", "", name.lower()) or "me"
    return f"sk-{name}_"


def check(
    config: Config, registration: Registration | None = None, others: list[Path] | None = None, own: list[Path] = ()
) -> None:
    """Raise ConfigError when the registration of `config` clashes with another on its homeserver."""
    registration = registration or build(config, read(config.registration_path))
    if others is None:
        others = homeserver_registrations(config)
    skip = {Path(p).resolve() for p in (*own, config.registration_path)}
    problems = conflicts(config, registration, [p for p in others if Path(p).resolve() not in skip])
    if problems:
        raise ConfigError(problems)


def homeserver_registrations(config: Config) -> list[Path]:
    """The registration files the homeserver of `config` loads, as far as this machine shows.

    `homeserver.config` names its homeserver.yaml. For the embedded homeserver: its own folder,
    and any other embedded homeserver of this user's configs on the same port and server name
    (the one a second config joins). An external homeserver we cannot read: nothing.
    """
    files: list[Path] = []
    for homeserver_yaml in homeserver_configs(config):
        try:
            data = yaml.safe_load(homeserver_yaml.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            continue
        for item in data.get("app_service_config_files") or []:
            path = Path(str(item)).resolve()
            if path not in files:
                files.append(path)
    return files


def homeserver_configs(config: Config) -> list[Path]:
    """homeserver.yaml files that (may) serve `config`: see homeserver_registrations."""
    found: list[Path] = []
    if config.homeserver_config is not None:
        found.append(config.homeserver_config)
    if config.homeserver_embedded:
        own = config.data_dir / "homeserver" / "homeserver.yaml"
        candidates = [own, *sorted((user_config_root() / "data").glob("*/homeserver/homeserver.yaml"))]
        for path in candidates:
            path = path.resolve()
            if path in found:
                continue
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
                port = int(data["listeners"][0]["port"])
            except (OSError, yaml.YAMLError, KeyError, IndexError, TypeError, ValueError):
                continue
            if path == own.resolve() or (port == config.homeserver_port and data.get("server_name") == config.domain):
                found.append(path)
    return found
