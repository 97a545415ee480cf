"""Who a message names: pills, plain @name text, and `/agent:command`
(docs/architecture.md "Who answers"). Pure functions.

A pill is a `matrix.to` link to a puppet in `formatted_body` (and, in newer clients, an entry of
`m.mentions.user_ids`); plain text is `@name` (case-insensitive), `@sk_name` or a full user id.
Order matters — mentioned agents answer in the order they appear — so every way of mentioning
is reduced to (position, agent) and sorted.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import unquote

PILL = re.compile(
    r"""<a\s[^>]*href=["']https://matrix\.to/#/([^"'?]+)[^"']*["'][^>]*>(.*?)</a>""", re.IGNORECASE | re.DOTALL
)
PLAIN = re.compile(r"(?<![\w@/])@([A-Za-z0-9._=\-]+(?::[A-Za-z0-9.\-]+(?::\d+)?)?)")
# a command name, then whitespace (any: arguments may start on the next line) or the end; a path
# like `/tmp/x.log` is not a command
NAME = r"([A-Za-z0-9_][\w.:\-]*)(?:\s+(.*))?$"
SLASH = re.compile(r"^/{1,2}([A-Za-z0-9][A-Za-z0-9_\-]*):" + NAME, re.DOTALL)
COMMAND = re.compile(r"^/{1,2}" + NAME, re.DOTALL)
TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class SlashCommand:
    agent: str
    command: str  # without the slash
    arguments: str

    @property
    def text(self) -> str:
        """What the agent receives: `/command arguments`."""
        return f"/{self.command} {self.arguments}".rstrip()


@dataclass(frozen=True)
class Parsed:
    mentions: tuple[str, ...]  # agents in order of first appearance
    slash: SlashCommand | None


def parse(
    body: str,
    formatted_body: str | None,
    mention_ids: Iterable[str],
    agent_of: Callable[[str], str | None],
    aliases: dict[str, str],
) -> Parsed:
    """Read one message. `agent_of(user_id)` maps a puppet id to its agent name (or None);
    `aliases` maps lowercase plain-text names (`alice`, `sk_alice`) to agent names."""
    names = {key.lower(): value for key, value in aliases.items()}
    found: list[tuple[int, str]] = []

    def add(position: int, agent: str | None) -> None:
        if agent is not None:
            found.append((position, agent))

    text_for_plain = body
    if formatted_body:
        for match in PILL.finditer(formatted_body):
            add(match.start(), agent_of(_unquote(match.group(1))))
        # plain @names outside pills, positioned in the same string so the order is one order
        stripped = PILL.sub(lambda m: " " * len(m.group(0)), formatted_body)
        text_for_plain = TAG.sub(lambda m: " " * len(m.group(0)), stripped)
        text_for_plain = html.unescape(text_for_plain) if "&" in text_for_plain else text_for_plain
    for match in PLAIN.finditer(text_for_plain):
        add(match.start(), _plain_agent(match.group(1), names, agent_of))
    known = {agent for _, agent in found}
    tail = len(text_for_plain) + 1
    for user_id in mention_ids or ():
        agent = agent_of(user_id)
        if agent is not None and agent not in known:
            # m.mentions carries no position: place it where its id or name shows, else at the end
            at = body.find(user_id)
            add(at if at >= 0 and not formatted_body else tail, agent)
            known.add(agent)
    found.sort(key=lambda item: item[0])
    ordered: list[str] = []
    for _, agent in found:
        if agent not in ordered:
            ordered.append(agent)
    return Parsed(mentions=tuple(ordered), slash=_slash(body, formatted_body, names, agent_of))


def _plain_agent(token: str, names: dict[str, str], agent_of: Callable[[str], str | None]) -> str | None:
    if ":" in token:
        return agent_of("@" + token)
    return names.get(token.lower().rstrip(".,;!?"))


def _slash(
    body: str, formatted_body: str | None, names: dict[str, str], agent_of: Callable[[str], str | None]
) -> SlashCommand | None:
    stripped = body.strip()
    match = SLASH.match(stripped)
    if match and match.group(1).lower() in names:
        return SlashCommand(names[match.group(1).lower()], match.group(2), (match.group(3) or "").strip())
    # `@agent /command args`: some clients never send an unknown `/x:y` (docs/architecture.md "Who answers")
    agent, rest = _leading_mention(body, formatted_body, names, agent_of)
    if agent is not None:
        command = COMMAND.match(rest)
        if command:
            return SlashCommand(agent, command.group(1), (command.group(2) or "").strip())
    return None


def _leading_mention(
    body: str, formatted_body: str | None, names: dict[str, str], agent_of: Callable[[str], str | None]
) -> tuple[str | None, str]:
    if formatted_body:
        match = PILL.match(formatted_body.strip())
        if match:
            agent = agent_of(_unquote(match.group(1)))
            rest = html.unescape(TAG.sub("", formatted_body.strip()[match.end() :]))
            return agent, rest.lstrip(":, \t").strip()
    match = PLAIN.match(body.strip())
    if match:
        agent = _plain_agent(match.group(1).rstrip(":,"), names, agent_of)
        rest = body.strip()[match.end() :]
        return agent, rest.lstrip(":, \t").strip()
    return None, ""


def _unquote(value: str) -> str:
    return unquote(value)


# ---- what the agent reads: `@name` for each mention, whatever the client put in the body -------

WORD = re.compile(r"\w")


def named(
    text: str,
    formatted_body: str | None,
    mention_ids: Iterable[str],
    agent_of: Callable[[str], str | None],
    titles: dict[str, str],
) -> str:
    """`text` with each mention of an agent written `@name` (docs/architecture.md "Who answers",
    "What each agent reads": `user: @alice …`).

    Element and nheko put a pill's label — the puppet's display name, "SmolLM2 · runs on this
    computer" — in the body, and the link only in `formatted_body`; a small model reads that
    label as part of the question. Each pill to a puppet has its label in `text` replaced: the
    occurrence nearest to where the pill sits in the formatted text, at word boundaries when
    there is one. An agent named only in `m.mentions` has its title replaced (at word
    boundaries); a puppet's full user id in the text (`@sk_alice:localhost`) becomes `@alice`.
    Text that is not found stays as it is."""
    spans: list[tuple[int, int, str]] = []  # (start, end, replacement) in `text`, not overlapping

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e, _ in spans)

    def place(label: str, agent: str, hint: int | None) -> bool:
        label = label.strip()
        if not label or label == f"@{agent}":
            return label == f"@{agent}" and label in text
        found = []
        at = text.find(label)
        while at >= 0:
            start, end = at, at + len(label)
            if start > 0 and text[start - 1] == "@":
                start -= 1  # a client that wrote "@Alice": not "@@alice"
            if free(start, end):
                found.append((start, end))
            at = text.find(label, at + 1)
        bounded = [(s, e) for s, e in found if _boundary(text, s, e)]
        candidates = bounded or ([] if hint is None else found)
        if not candidates:
            return False
        start, end = min(candidates, key=lambda span: abs(span[0] - hint)) if hint is not None else candidates[0]
        spans.append((start, end, f"@{agent}"))
        return True

    pilled = set()
    if formatted_body:
        for match in PILL.finditer(formatted_body):
            agent = agent_of(_unquote(match.group(1)))
            if agent is None:
                continue
            label = html.unescape(TAG.sub("", match.group(2)))
            hint = len(html.unescape(TAG.sub("", formatted_body[: match.start()])))
            place(label, agent, hint)
            pilled.add(agent)
    for user_id in mention_ids or ():
        agent = agent_of(user_id) if isinstance(user_id, str) else None
        if agent is not None and agent not in pilled and agent in titles:
            place(titles[agent], agent, None)
            pilled.add(agent)
    for match in PLAIN.finditer(text):
        token = match.group(1)
        agent = agent_of("@" + token) if ":" in token else None
        if agent is not None and free(match.start(), match.end()):
            spans.append((match.start(), match.end(), f"@{agent}"))
    if not spans:
        return text
    out, cursor = [], 0
    for start, end, replacement in sorted(spans):
        out.append(text[cursor:start])
        out.append(replacement)
        cursor = end
    out.append(text[cursor:])
    return "".join(out)


def _boundary(text: str, start: int, end: int) -> bool:
    """Whether text[start:end] is not part of a longer word on either side."""
    before = start == 0 or not (WORD.match(text[start - 1]) and WORD.match(text[start]))
    after = end == len(text) or not (WORD.match(text[end]) and WORD.match(text[end - 1]))
    return before and after
