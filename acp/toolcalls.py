"""Plans and tool calls of coding agents, as plain values (pure: no I/O).

ACP v1 (schema: `Plan`, `PlanEntry`, `ToolCall`, `ToolCallUpdate`, `ToolCallContent`):

* a `plan` update carries the whole plan; the client replaces what it showed;
* a `tool_call` announces a call, `tool_call_update`s change it: every field but the id is
  optional and only changed fields are sent; `content` and `locations` replace the whole list;
* tool-call content is `content` (a content block), `diff` {path, oldText (null: a new file),
  newText} or `terminal` {terminalId};
* agents that run commands themselves (codex-acp, claude-code-acp) stream a terminal's output
  in the update's `_meta` when the client announced `_meta.terminal_output`:
  `terminal_info` {terminal_id}, `terminal_output` (or `terminal_output_delta`)
  {terminal_id, data} — data is appended — and `terminal_exit` {terminal_id, exit_code, signal};
* agents that send a command's output as plain text content instead (OpenCode: its `bash` tool's
  output as a `content` block, the exit code only in `rawOutput.metadata.exit`) get the same
  terminal view: `ToolCall.text_terminal()`;
* a to-do tool (OpenCode's `todowrite`, Gemini CLI's `write_todos`: a call whose input is
  {todos: [{content | description, status, priority}]}) is the agent's plan by another name:
  `ToolCall.todos` is its list as plan entries (the bridge shows it as the turn's checklist).

`ToolCall.apply()` folds updates into the call's current state; the bridge keeps one per call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PLAN_STATUSES = ("pending", "in_progress", "completed")
TODO_STATUSES = PLAN_STATUSES + ("cancelled",)  # a to-do tool's items may also be cancelled
# to-do tools by name (the title agents give the call before its input is known), compared in
# lower case without separators
TODO_TOOLS = frozenset({"todowrite", "writetodos", "todos", "updatetodos"})
PRIORITIES = ("high", "medium", "low")
TOOL_STATUSES = ("pending", "in_progress", "completed", "failed")
TOOL_KINDS = ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other")
TERMINAL_KEEP = 64 * 1024  # characters of a terminal's output kept (only the tail is shown)


@dataclass(frozen=True)
class PlanEntry:
    content: str
    priority: str = "medium"  # high | medium | low
    status: str = "pending"  # pending | in_progress | completed


@dataclass(frozen=True)
class Location:
    path: str
    line: int | None = None


@dataclass(frozen=True)
class ToolContent:
    """One item of a tool call's `content` list."""

    type: str  # content | diff | terminal (anything else: kept, shown as text)
    text: str = ""  # content: the block's text (placeholders for images etc.)
    block: dict[str, Any] | None = None  # content: the block as sent
    path: str = ""  # diff
    old_text: str | None = None  # diff: None for a new file
    new_text: str = ""  # diff
    terminal_id: str = ""  # terminal


@dataclass(frozen=True)
class TerminalMeta:
    """What one update's `_meta` says about a terminal (see the module docstring)."""

    terminal_id: str
    data: str = ""  # output to append
    exited: bool = False
    exit_code: int | None = None
    signal: str | None = None


@dataclass
class Terminal:
    output: str = ""
    exited: bool = False
    exit_code: int | None = None
    signal: str | None = None
    dropped: int = 0  # characters cut from the front to keep TERMINAL_KEEP

    def append(self, data: str) -> None:
        self.output += data
        if len(self.output) > TERMINAL_KEEP:
            cut = len(self.output) - TERMINAL_KEEP
            self.output = self.output[cut:]
            self.dropped += cut


@dataclass
class ToolCall:
    id: str
    title: str = ""
    kind: str = "other"
    status: str = "pending"
    locations: list[Location] = field(default_factory=list)
    content: list[ToolContent] = field(default_factory=list)
    raw_input: Any = None
    raw_output: Any = None
    terminals: dict[str, Terminal] = field(default_factory=dict)
    updates: int = 0  # how many updates were folded in
    todo: bool = False  # a to-do tool (see `todos`): once known, it stays so

    def apply(self, update: Any) -> None:
        """Fold one normalised `tool_call` / `tool_call_update` (acp.updates.Update) in."""
        self.updates += 1
        if update.title is not None:
            self.title = update.title
        if update.tool_kind is not None:
            self.kind = update.tool_kind
        if update.status is not None:
            self.status = update.status
        if update.locations is not None:
            self.locations = list(update.locations)
        if update.content is not None:
            self.content = list(update.content)  # replaces the whole list (ACP)
        if "rawInput" in update.raw:
            self.raw_input = update.raw["rawInput"]
        if "rawOutput" in update.raw:
            self.raw_output = update.raw["rawOutput"]
        for item in self.content:
            if item.type == "terminal" and item.terminal_id:
                self.terminals.setdefault(item.terminal_id, Terminal())
        meta = update.terminal
        if meta is not None:
            terminal = self.terminals.setdefault(meta.terminal_id, Terminal())
            if meta.data:
                terminal.append(meta.data)
            if meta.exited:
                terminal.exited, terminal.exit_code, terminal.signal = True, meta.exit_code, meta.signal
        if not self.todo:
            self.todo = (
                _todo_list(self.raw_input) is not None
                or "".join(ch for ch in self.title.lower() if ch.isalnum()) in TODO_TOOLS
            )

    @property
    def todos(self) -> list[PlanEntry] | None:
        """A to-do tool's list, as plan entries: from its input (the list it writes), else from
        its output; None when this is no to-do tool or its list is not known yet."""
        if not self.todo:
            return None
        found = _todo_list(self.raw_input)
        if found is None and isinstance(self.raw_output, dict):
            found = _todo_list(self.raw_output.get("metadata")) or _todo_list(_json(self.raw_output.get("output")))
        if found is None:
            return None
        return parse_plan(found, TODO_STATUSES, ("description", "text", "title"))

    def text_terminal(self) -> Terminal | None:
        """A command's output sent as text content, as a terminal (its tail and exit status
        are what matter, not its head): for `execute` calls with no terminal of their own.
        Finished, it has exited with the code `rawOutput` reports (None if it reports none)."""
        if self.kind != "execute" or self.terminals:
            return None
        texts = [item.text for item in self.content if item.type == "content" and item.text]
        ended = exit_of(self.raw_output) if self.finished else None
        if not texts and ended is None:
            return None
        term = Terminal()
        term.append("\n".join(texts))
        if self.finished:
            term.exited = True
            term.exit_code, term.signal = ended or (None, None)
        return term

    @property
    def diffs(self) -> list[ToolContent]:
        return [item for item in self.content if item.type == "diff"]

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed")


# --- parsing (tolerant: agents may send anything) --------------------------------------------


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _todo_list(value: Any) -> list | None:
    """`todos` of a to-do tool's input (or output), or the list itself; None if not one."""
    if isinstance(value, dict):
        value = value.get("todos")
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return value
    return [] if value == [] else None


def _json(value: Any) -> Any:
    if not isinstance(value, str) or not value.lstrip().startswith(("[", "{")):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def parse_plan(
    value: Any, statuses: tuple[str, ...] = PLAN_STATUSES, other_names: tuple[str, ...] = ()
) -> list[PlanEntry]:
    """A plan's entries; `statuses` are the ones kept (any other is pending), `other_names` the
    keys tried for an entry's text when it has no `content`."""
    entries = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, dict):
            continue
        content = next((item[key] for key in ("content", *other_names) if item.get(key) is not None), None)
        if content is None:
            continue
        priority = item.get("priority") if item.get("priority") in PRIORITIES else "medium"
        status = item.get("status") if item.get("status") in statuses else "pending"
        entries.append(PlanEntry(str(content), priority, status))
    return entries


def parse_locations(value: Any) -> list[Location] | None:
    if not isinstance(value, list):
        return None
    found = []
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("path"), str) and item["path"]:
            line = item.get("line")
            found.append(Location(item["path"], line if isinstance(line, int) and not isinstance(line, bool) else None))
    return found


def parse_content(value: Any, text_of) -> list[ToolContent] | None:
    """A tool call's `content` list; `text_of` renders a content block as text."""
    if not isinstance(value, list):
        return None
    found = []
    for item in value:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "content":
            block = item.get("content") if isinstance(item.get("content"), dict) else None
            found.append(ToolContent("content", text=text_of(block), block=block))
        elif kind == "diff":
            path = _str(item.get("path"))
            if path is None:
                continue
            old = item.get("oldText")
            found.append(
                ToolContent(
                    "diff",
                    path=path,
                    old_text=old if isinstance(old, str) else None,
                    new_text=_str(item.get("newText")) or "",
                )
            )
        elif kind == "terminal":
            terminal_id = _str(item.get("terminalId"))
            if terminal_id:
                found.append(ToolContent("terminal", terminal_id=terminal_id))
        elif isinstance(kind, str):
            found.append(ToolContent(kind, text=f"[{kind}]"))
    return found


EXIT_KEYS = ("exit", "exitCode", "exit_code")


def exit_of(raw_output: Any) -> tuple[int | None, str | None] | None:
    """The exit code and signal a tool call's `rawOutput` reports, if it names one: `exit`,
    `exitCode` or `exit_code` at its top or in its `metadata` (OpenCode: {output, metadata:
    {exit}}); a code of null (a command stopped or timed out) is (None, signal or None)."""
    for where in (raw_output, raw_output.get("metadata") if isinstance(raw_output, dict) else None):
        if not isinstance(where, dict):
            continue
        for key in EXIT_KEYS:
            if key in where:
                code = where[key]
                signal = _str(where.get("signal"))
                return (code if isinstance(code, int) and not isinstance(code, bool) else None), signal
    return None


def parse_terminal_meta(meta: Any) -> TerminalMeta | None:
    """The terminal extension keys of an update's `_meta`, if any."""
    if not isinstance(meta, dict):
        return None
    terminal_id, data, exited, code, signal = None, "", False, None, None
    info = meta.get("terminal_info")
    if isinstance(info, dict):
        terminal_id = _str(info.get("terminal_id")) or terminal_id
    for key in ("terminal_output", "terminal_output_delta"):
        output = meta.get(key)
        if isinstance(output, dict):
            terminal_id = _str(output.get("terminal_id")) or terminal_id
            if isinstance(output.get("data"), str):
                data += output["data"]
    end = meta.get("terminal_exit")
    if isinstance(end, dict):
        terminal_id = _str(end.get("terminal_id")) or terminal_id
        exited = True
        raw_code = end.get("exit_code")
        code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else None
        signal = _str(end.get("signal"))
    if terminal_id is None:
        return None
    return TerminalMeta(terminal_id, data, exited, code, signal)
