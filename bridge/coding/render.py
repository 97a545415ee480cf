"""Coding agents' work as Matrix messages (pure: no I/O, tested without a homeserver).

Every function returns a `Rendered` — the plain `body` and the HTML `formatted_body` — and the
HTML always goes through the project's sanitiser (bridge/matrix/markdown.py: the Matrix HTML subset,
nh3), whatever an agent put in a title, a path or a diff. Plain bodies follow the answer's
conventions: one line per item, code in fenced blocks.

* `plan()` — the plan as one checklist: ⬜ pending, 🔄 in progress, ✅ done (✖️ cancelled, for
  to-do tools); high and low priorities tagged (medium is the default, not tagged); "n/m done"
  in the heading.
* `tool_call()` — kind, title, status, locations, then its content: diffs (`diff()`),
  terminal output (`terminal()`), text.
* `diff()` — a unified diff with the path and +/− counts, inline up to DIFF_INLINE_LINES lines,
  collapsed in `<details>` past that, and past DIFF_ATTACH_LINES lines or DIFF_ATTACH_CHARS
  characters only a summary: `attach` says the diff should go as a file.
* `terminal()` — the last TERMINAL_TAIL_LINES lines in a code block, then the exit status; a
  command whose output came as text content is shown the same way (`ToolCall.text_terminal`).
* `permission()` — the request with the diff or command it is about; options numbered and
  labelled by kind (allow once / allow always / reject once / reject always).
* `setting_change()`, `status()`, `elicitation()`, `url_consent()`, `stop_reason()` — one line
  per change, one line per member, a numbered question message, the URL consent question,
  the line a stop reason ends an answer with.
"""

from __future__ import annotations

import difflib
import html
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from acp.elicitation import LETTERS, ElicitationRequest, Field
from acp.toolcalls import Location, PlanEntry, Terminal, ToolCall, ToolContent
from acp.updates import normalise_update

from ..channels.rules.budget_rules import money, tokens
from ..matrix.markdown import escape_html, sanitise

DIFF_INLINE_LINES = 12  # diff lines shown as they are; more go into <details>
DIFF_ATTACH_LINES = 400  # past this, or
DIFF_ATTACH_CHARS = 20_000  # this, the diff is a file, the message a summary
TERMINAL_TAIL_LINES = 15
TERMINAL_TAIL_CHARS = 3_000
TEXT_CHARS = 1_500  # a tool call's text content, cut
INPUT_CHARS = 300  # a permission's raw input, cut
LOCATIONS_SHOWN = 5

PLAN_MARKS = {"pending": "⬜", "in_progress": "🔄", "completed": "✅", "cancelled": "✖️"}
KIND_ICONS = {
    "read": "📖",
    "edit": "✏️",
    "delete": "🗑️",
    "move": "📦",
    "search": "🔍",
    "execute": "▶️",
    "think": "💭",
    "fetch": "🌐",
    "switch_mode": "🔀",
    "other": "🔧",
}
STATUS_WORDS = {"pending": "⏳ pending", "in_progress": "🔄 running", "completed": "✅ done", "failed": "❌ failed"}
OPTION_LABELS = {
    "allow_once": "✅ Allow once",
    "allow_always": "✅ Allow always",
    "reject_once": "❌ Reject once",
    "reject_always": "🚫 Reject always",
}
STOP_LINES = {
    "max_tokens": "✂️ The answer was cut: the agent reached its token limit.",
    "max_turn_requests": "✂️ The answer was cut: the agent reached its limit of requests for one turn.",
    "refusal": "🚫 The agent refused to go on; this prompt will not be part of its next turn.",
}


@dataclass(frozen=True)
class Rendered:
    body: str
    html: str

    def content(self, msgtype: str = "m.text") -> dict[str, Any]:
        """As m.room.message content."""
        return {"msgtype": msgtype, "body": self.body, "format": "org.matrix.custom.html", "formatted_body": self.html}


def _done(body_lines: Iterable[str], html_parts: Iterable[str]) -> Rendered:
    return Rendered("\n".join(body_lines), sanitise("".join(html_parts)))


def _e(text: Any) -> str:
    return escape_html(str(text))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- plan ------------------------------------------------------------------------------


def plan(entries: list[PlanEntry], heading: str = "Plan") -> Rendered:
    done = sum(e.status == "completed" for e in entries)
    head = f"📋 {heading} ({done}/{len(entries)} done)" if entries else f"📋 {heading}: (empty)"
    body, items = [head], []
    for entry in entries:
        mark = PLAN_MARKS.get(entry.status, "⬜")
        tag = f" · {entry.priority} priority" if entry.priority in ("high", "low") else ""
        body.append(f"{mark} {entry.content}{tag}")
        text = _e(entry.content)
        if entry.status in ("completed", "cancelled"):
            text = f"<del>{text}</del>"
        elif entry.status == "in_progress":
            text = f"<strong>{text}</strong>"
        items.append(f"<li>{mark} {text}{f' <em>({_e(entry.priority)} priority)</em>' if tag else ''}</li>")
    html = [
        f"<p><strong>📋 {_e(heading)}</strong> " + (f"({done}/{len(entries)} done)" if entries else "(empty)") + "</p>"
    ]
    if items:
        html.append("<ul>" + "".join(items) + "</ul>")
    return _done(body, html)


# --- diffs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffView:
    path: str
    added: int
    removed: int
    text: str  # the unified diff (what a file attachment would hold)
    lines: int
    new_file: bool
    attach: bool  # too long for a message: send `text` as a file, show `rendered`
    rendered: Rendered

    @property
    def filename(self) -> str:
        return (os.path.basename(self.path) or "change") + ".diff"


def unified(path: str, old: str | None, new: str) -> str:
    a = [] if old is None else old.splitlines()
    b = new.splitlines()
    lines = difflib.unified_diff(
        a, b, "/dev/null" if old is None else f"a/{path.lstrip('/')}", f"b/{path.lstrip('/')}", n=3, lineterm=""
    )
    return "\n".join(lines)


def diff(path: str, old: str | None, new: str) -> DiffView:
    text = unified(path, old, new)
    lines = text.split("\n") if text else []
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    what = "new file" if old is None else ("no change" if not text else "")
    counts = f"+{added} −{removed}"
    summary = f"{path} ({what + ', ' if what else ''}{counts})"
    attach = len(lines) > DIFF_ATTACH_LINES or len(text) > DIFF_ATTACH_CHARS
    if attach:
        rendered = Rendered(
            f"📄 {summary}: {len(lines)} lines, attached as a file",
            sanitise(
                f"<p>📄 <code>{_e(path)}</code> ({_e(what + ', ' if what else '')}"
                f"{_e(counts)}): {len(lines)} lines, attached as a file</p>"
            ),
        )
    elif not text:
        rendered = Rendered(f"📄 {summary}", sanitise(f"<p>📄 <code>{_e(path)}</code> (no change)</p>"))
    else:
        code = f'<pre><code class="language-diff">{_e(text)}</code></pre>'
        head = f"📄 <code>{_e(path)}</code> ({_e(what + ', ' if what else '')}{_e(counts)})"
        if len(lines) > DIFF_INLINE_LINES:
            html = f"<details><summary>{head}</summary>{code}</details>"
        else:
            html = f"<p>{head}</p>{code}"
        rendered = Rendered(f"📄 {summary}\n```diff\n{text}\n```", sanitise(html))
    return DiffView(path, added, removed, text, len(lines), old is None, attach, rendered)


# --- terminals ---------------------------------------------------------------------------


def exit_line(terminal: Terminal) -> str:
    if not terminal.exited:
        return "🔄 still running…"
    if terminal.signal:
        return f"❌ stopped by {terminal.signal}"
    if terminal.exit_code == 0:
        return "✅ exit code 0"
    if terminal.exit_code is None:
        return "⏹ ended"
    return f"❌ exit code {terminal.exit_code}"


def terminal(term: Terminal) -> Rendered:
    lines = term.output.rstrip("\n").split("\n") if term.output.strip() else []
    shown = lines[-TERMINAL_TAIL_LINES:]
    tail = "\n".join(shown)
    if len(tail) > TERMINAL_TAIL_CHARS:
        tail = "…" + tail[-(TERMINAL_TAIL_CHARS - 1) :]
    hidden = len(lines) - len(shown)
    earlier = f"… {hidden} earlier line{'s' if hidden != 1 else ''}" if hidden or term.dropped else ""
    if term.dropped and not hidden:
        earlier = "… earlier output"
    end = exit_line(term)
    body = ([earlier] if earlier else []) + ([f"```\n{tail}\n```"] if tail else ["(no output)"]) + [end]
    html = (
        ([f"<p><em>{_e(earlier)}</em></p>"] if earlier else [])
        + ([f"<pre><code>{_e(tail)}</code></pre>"] if tail else ["<p><em>(no output)</em></p>"])
        + [f"<p>{_e(end)}</p>"]
    )
    return _done(body, html)


# --- tool calls --------------------------------------------------------------------------


def locations_text(locations: list[Location]) -> str:
    names = [f"{loc.path}:{loc.line}" if loc.line is not None else loc.path for loc in locations[:LOCATIONS_SHOWN]]
    more = len(locations) - len(names)
    return ", ".join(names) + (f" (and {more} more)" if more > 0 else "")


def tool_call(call: ToolCall) -> tuple[Rendered, list[DiffView]]:
    """The tool call's message, and its diffs to attach as files (the long ones)."""
    icon = KIND_ICONS.get(call.kind, "🔧")
    title = call.title or "a tool call"
    status = STATUS_WORDS.get(call.status, call.status)
    body = [f"{icon} {title} — {status}"]
    html = [f"<p>{icon} <strong>{_e(title)}</strong> — {_e(status)}</p>"]
    if call.locations:
        where = locations_text(call.locations)
        body.append(f"Where: {where}")
        html.append(f"<p>Where: <code>{_e(where)}</code></p>")
    attachments: list[DiffView] = []
    terminals_shown: set[str] = set()
    shell = call.text_terminal()  # a command's output sent as text: its tail, not its head
    for item in call.content:
        if shell is not None and item.type == "content":
            continue
        part = _content_part(call, item, attachments, terminals_shown)
        if part is not None:
            body.append(part.body)
            html.append(part.html)
    for terminal_id, term in call.terminals.items():  # output announced only in _meta
        if terminal_id not in terminals_shown:
            part = terminal(term)
            body.append(part.body)
            html.append(part.html)
    if shell is not None:
        part = terminal(shell)
        body.append(part.body)
        html.append(part.html)
    return _done(body, html), attachments


def _content_part(
    call: ToolCall, item: ToolContent, attachments: list[DiffView], terminals_shown: set[str]
) -> Rendered | None:
    if item.type == "diff":
        view = diff(item.path, item.old_text, item.new_text)
        if view.attach:
            attachments.append(view)
        return view.rendered
    if item.type == "terminal":
        terminals_shown.add(item.terminal_id)
        return terminal(call.terminals.get(item.terminal_id) or Terminal())
    text = _cut(item.text, TEXT_CHARS).strip()
    if not text:
        return None
    return Rendered(text, sanitise(f"<pre><code>{_e(text)}</code></pre>" if "\n" in text else f"<p>{_e(text)}</p>"))


# --- permissions -------------------------------------------------------------------------


def option_label(option: dict[str, Any]) -> str:
    name = str(option.get("name") or option.get("optionId") or "?")
    label = OPTION_LABELS.get(str(option.get("kind")))
    return f"{label} — {name}" if label and name.lower() != label.split(" ", 1)[1].lower() else (label or name)


def command_of(raw_input: Any) -> str | None:
    """The command a tool call runs, if its input says (agents use `command`, maybe a list)."""
    if isinstance(raw_input, str):
        return raw_input
    if isinstance(raw_input, dict):
        command = raw_input.get("command") or raw_input.get("cmd")
        if isinstance(command, list) and all(isinstance(c, str) for c in command):
            return " ".join(command)
        if isinstance(command, str):
            return command
    return None


def permission(
    agent_title: str, tool_call_raw: dict[str, Any], options: list[dict[str, Any]], known: ToolCall | None = None
) -> tuple[Rendered, list[DiffView]]:
    """A permission request: what it is about (the diff, the command), numbered options.
    `known` is the call as the turn saw it so far (a request may send only its id)."""
    call = ToolCall(str(tool_call_raw.get("toolCallId") or ""))
    if known is not None:
        call.title, call.kind, call.locations, call.content = known.title, known.kind, known.locations, known.content
        call.raw_input, call.terminals = known.raw_input, known.terminals
    # the request's toolCall is a ToolCallUpdate: fold it over what the turn saw
    call.apply(normalise_update({**tool_call_raw, "sessionUpdate": "tool_call_update"}))
    icon = KIND_ICONS.get(call.kind, "🔧")
    title = call.title or "a tool call"
    body = [f"🔐 {agent_title} asks permission: {icon} {title}"]
    html = [f"<p>🔐 <strong>{_e(agent_title)}</strong> asks permission: {icon} <strong>{_e(title)}</strong></p>"]
    command = command_of(call.raw_input)
    if command:
        body.append(f"Command: `{_cut(command, INPUT_CHARS)}`")
        html.append(f"<p>Command:</p><pre><code>{_e(_cut(command, INPUT_CHARS))}</code></pre>")
    elif call.raw_input not in (None, "", {}, []) and not call.diffs:
        shown = _cut(json.dumps(call.raw_input, ensure_ascii=False), INPUT_CHARS)
        body.append(f"Input: {shown}")
        html.append(f"<p>Input:</p><pre><code>{_e(shown)}</code></pre>")
    if call.locations:
        where = locations_text(call.locations)
        body.append(f"Where: {where}")
        html.append(f"<p>Where: <code>{_e(where)}</code></p>")
    attachments: list[DiffView] = []
    for item in call.content:
        part = _content_part(call, item, attachments, set())
        if part is not None:
            body.append(part.body)
            html.append(part.html)
    body.append("")
    body.extend(f"{i}. {option_label(o)}" for i, o in enumerate(options, 1))
    body.extend(["", "React with the number, or reply with it."])
    html.append("<ol>" + "".join(f"<li>{_e(option_label(o))}</li>" for o in options) + "</ol>")
    html.append("<p>React with the number, or reply with it.</p>")
    return _done(body, html), attachments


# --- settings and status ---------------------------------------------------------------------


def setting_change(agent_title: str, what: str, old: str | None, new: str, by_agent: bool = False) -> Rendered:
    """One line: `🔀 alice: mode Ask → Plan` (by the agent itself: `alice switched …`)."""
    change = f"{old} → {new}" if old and old != new else new
    line = f"🔀 {agent_title} switched {what} to {change}" if by_agent else f"🔀 {agent_title}: {what} {change}"
    return Rendered(line, sanitise(f"<p>{_e(line)}</p>"))


def choices_list(agent_title: str, what: str, current: str | None, choices: list[tuple[str, str, str]]) -> Rendered:
    """`!mode alice`: the current value and the others, by id and name (id, name, description)."""
    body = [f"{agent_title} — {what}:"]
    items = []
    for ident, name, description in choices:
        mark = "▶" if ident == current else "·"
        label = ident if name in ("", ident) else f"{ident} ({name})"
        extra = f" — {description}" if description else ""
        body.append(f"{mark} {label}{extra}{' (current)' if ident == current else ''}")
        items.append(
            f"<li>{'<strong>' if ident == current else ''}{_e(label)}"
            f"{'</strong> (current)' if ident == current else ''}{_e(extra)}</li>"
        )
    html = [f"<p><strong>{_e(agent_title)}</strong> — {_e(what)}:</p>", "<ul>" + "".join(items) + "</ul>"]
    return _done(body, html)


@dataclass(frozen=True)
class StatusLine:
    agent: str  # the member's display title
    state: str  # stopped | ready | answering | waiting …
    mode: str | None = None
    model: str | None = None
    used: int | None = None
    size: int | None = None
    cost: float | None = None
    currency: str | None = None
    title: str | None = None
    session: str | None = None  # its ACP session id: another ACP client resumes it by this


def unreported(line: StatusLine) -> str | None:
    """What an agent with a session here did not report, in words: "no model or cost reported
    by this agent" (None: it reported all, or it has no session to report from)."""
    if not line.session:
        return None
    missing = [
        what for what, value in (("model", line.model), ("context", line.used), ("cost", line.cost)) if value is None
    ]
    if not missing:
        return None
    words = missing[0] if len(missing) == 1 else ", ".join(missing[:-1]) + " or " + missing[-1]
    return f"no {words} reported by this agent"


def status_text(line: StatusLine, ids: bool = False) -> str:
    """One member's line of `!status`: its session by title, its id only with `ids`."""
    parts = [line.state]
    if line.mode:
        parts.append(f"mode {line.mode}")
    if line.model:
        parts.append(f"model {line.model}")
    if line.used is not None and line.size:
        parts.append(f"context {tokens(line.used)}/{tokens(line.size)} ({round(100 * line.used / line.size)}%)")
    elif line.used is not None:
        parts.append(f"context {tokens(line.used)}")
    if line.cost is not None:
        parts.append(f"cost {money(line.cost, line.currency)}")
    if line.title:
        parts.append(f"“{line.title}”")
    missing = unreported(line)
    if missing:
        parts.append(missing)
    if ids and line.session:
        parts.append(f"session {line.session}")
    return f"{line.agent}: " + " · ".join(parts)


def status(lines: list[StatusLine], ids: bool = False) -> Rendered:
    if not lines:
        return Rendered("No agents in this channel.", sanitise("<p>No agents in this channel.</p>"))
    texts = [status_text(line, ids) for line in lines]
    return _done(texts, ["<ul>" + "".join(f"<li>{_e(t)}</li>" for t in texts) + "</ul>"])


# --- elicitation -------------------------------------------------------------------------


def field_hint(f: Field) -> str:
    if f.type == "boolean":
        hint = "yes / no"
    elif f.type in ("number", "integer"):
        hint = "a whole number" if f.type == "integer" else "a number"
        if f.minimum is not None and f.maximum is not None:
            hint += f", {f.minimum:g}–{f.maximum:g}"
        elif f.minimum is not None:
            hint += f", at least {f.minimum:g}"
        elif f.maximum is not None:
            hint += f", at most {f.maximum:g}"
    elif f.type == "array":
        hint = "one or more, separated by commas"
    elif f.options:
        hint = "one of"
    else:
        hint = {
            "email": "an email address",
            "uri": "a URL",
            "date": "a date (YYYY-MM-DD)",
            "date-time": "a date and time",
        }.get(f.format or "", "text")
    if f.default is not None:
        shown = ("yes" if f.default else "no") if isinstance(f.default, bool) else f.default
        hint += f"; default {shown}"
    return hint + ("" if f.required else "; optional")


def elicitation(agent_title: str, request: ElicitationRequest) -> Rendered:
    """A form as a numbered message: the owner replies `1. answer` per line."""
    body = [f"❓ {agent_title} asks: {request.message}" if request.message else f"❓ {agent_title} asks:"]
    html = [f"<p>❓ <strong>{_e(agent_title)}</strong> asks: {_e(request.message)}</p>", "<ol>"]
    for number, f in enumerate(request.fields, 1):
        label = f.label
        description = f" — {f.description}" if f.description else ""
        body.append(f"{number}. {label}{description} ({field_hint(f)})")
        options_html = ""
        if f.options:
            opts = [f"{LETTERS[i]}) {o.title}" for i, o in enumerate(f.options)]
            body.append("   " + "  ".join(opts))
            options_html = "<br>" + _e("  ".join(opts))
        html.append(
            f"<li><strong>{_e(label)}</strong>{_e(description)} <em>({_e(field_hint(f))})</em>{options_html}</li>"
        )
    html.append("</ol>")
    how = (
        "Reply to this message with your answer"
        if len(request.fields) == 1
        else "Reply to this message, one line per question: `1. answer`"
    )
    how += "; `decline` to refuse."
    body.extend(["", how])
    html.append(f"<p>{_e(how)}</p>")
    return _done(body, html)


def url_consent(agent_title: str, request: ElicitationRequest) -> Rendered:
    """URL mode, first step: the host only, and a question (the link comes after a yes)."""
    host = request.host or "?"
    line = f"🔗 {agent_title} asks you to open a page on {host}"
    what = f": {request.message}" if request.message else ""
    how = "Reply `yes` to get the link, `no` to decline."
    return _done(
        [line + what, how],
        [
            f"<p>🔗 <strong>{_e(agent_title)}</strong> asks you to open a page on "
            f"<strong>{_e(host)}</strong>{_e(what)}</p><p>{_e(how)}</p>"
        ],
    )


def url_link(request: ElicitationRequest) -> Rendered:
    """URL mode, after consent: the link itself (http and https only)."""
    if request.host is None:
        return Rendered(
            "The agent's link is not an http(s) URL; it is not shown.",
            sanitise("<p>The agent's link is not an http(s) URL; it is not shown.</p>"),
        )
    link = request.link or ""  # checked by acp.elicitation.safe_link: no quote, no backslash
    return Rendered(
        f"Open: {link}", sanitise(f'<p>Open: <a href="{html.escape(link, quote=True)}">{_e(request.host)}</a></p>')
    )


def url_waiting(request: ElicitationRequest) -> str:
    """A URL question accepted: the link is posted, the owner finishes there."""
    return f"🔗 Link sent: waiting for you to finish on {request.host or 'that page'}"


def url_done(request: ElicitationRequest, elsewhere: bool) -> str:
    """A URL question the agent says is complete (elicitation/complete); `elsewhere`: before
    the owner answered here."""
    host = request.host or "that page"
    return f"✅ Done elsewhere: the agent says {host} is complete" if elsewhere else f"✅ Done on {host}"


def elicitation_outcome(action: str) -> str:
    return {"accept": "✅ Answered", "decline": "❌ Declined", "cancel": "⏹ Cancelled"}.get(action, action)


def stop_reason(reason: str) -> str | None:
    """The one visible line an answer ends with for max_tokens, max_turn_requests, refusal."""
    return STOP_LINES.get(reason)
