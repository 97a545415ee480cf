"""bridge.coding.render: plans, tool calls, diffs, terminals, permissions, settings, status and
questions as Matrix messages (pure, no homeserver)."""

import json
from html.parser import HTMLParser

from acp.elicitation import parse_request
from acp.toolcalls import PlanEntry, Terminal, ToolCall
from acp.updates import normalise_update
from bridge.coding import render

OLD = "a\nb\nc\n"
NEW = "a\nB\nc\nd\n"


def test_plan_is_one_checklist_with_statuses_and_priorities():
    out = render.plan(
        [
            PlanEntry("Read the code", "high", "completed"),
            PlanEntry("Write the change", "medium", "in_progress"),
            PlanEntry("Tidy up", "low", "pending"),
        ]
    )
    assert out.body.split("\n") == [
        "📋 Plan (1/3 done)",
        "✅ Read the code · high priority",
        "🔄 Write the change",
        "⬜ Tidy up · low priority",
    ]
    assert "<del>Read the code</del>" in out.html and "<strong>Write the change</strong>" in out.html
    assert out.html.count("<li>") == 3
    assert render.plan([]).body == "📋 Plan: (empty)"
    content = out.content()
    assert content["format"] == "org.matrix.custom.html" and content["body"] == out.body


def test_small_diff_inline_with_path_and_counts():
    view = render.diff("/p/notes.py", OLD, NEW)
    assert (view.added, view.removed, view.new_file, view.attach) == (2, 1, False, False)
    assert view.rendered.body.startswith("📄 /p/notes.py (+2 −1)\n```diff\n--- a/p/notes.py\n+++ b/p/notes.py")
    assert "-b" in view.text and "+B" in view.text and "+d" in view.text
    assert "<details>" not in view.rendered.html and 'class="language-diff"' in view.rendered.html


def test_new_file_long_diff_collapsed_and_huge_diff_attached():
    new = render.diff("/p/new.py", None, "x\ny\n")
    assert (
        new.new_file and new.text.startswith("--- /dev/null\n+++ b/p/new.py") and "new file, +2 −0" in new.rendered.body
    )
    long = render.diff("/p/a.py", "".join(f"{i}\n" for i in range(30)), "".join(f"{i}!\n" for i in range(30)))
    assert "<details><summary>" in long.rendered.html and not long.attach and long.added == 30
    huge = render.diff("/p/big.py", "".join(f"{i}\n" for i in range(500)), "".join(f"{i}?\n" for i in range(500)))
    assert huge.attach and huge.filename == "big.py.diff"
    assert huge.rendered.body == f"📄 /p/big.py (+500 −500): {huge.lines} lines, attached as a file"
    assert "```" not in huge.rendered.body and huge.text.count("\n") > 900
    assert render.diff("/p/same.py", "a\n", "a\n").rendered.body == "📄 /p/same.py (no change, +0 −0)"


def test_terminal_tail_and_exit_status():
    term = Terminal()
    term.append("".join(f"line {i}\n" for i in range(20)))
    term.exited, term.exit_code = True, 2
    out = render.terminal(term)
    lines = out.body.split("\n")
    assert lines[0] == "… 5 earlier lines" and lines[1] == "```" and lines[2] == "line 5"
    assert lines[-2] == "```" and lines[-1] == "❌ exit code 2" and "line 4" not in out.body
    assert render.exit_line(Terminal(exited=True, exit_code=0)) == "✅ exit code 0"
    assert render.exit_line(Terminal(exited=True, signal="SIGKILL")) == "❌ stopped by SIGKILL"
    assert render.exit_line(Terminal()) == "🔄 still running…"
    assert render.terminal(Terminal()).body == "(no output)\n🔄 still running…"


def fold(*raws) -> ToolCall:
    call = ToolCall(raws[0]["toolCallId"])
    for raw in raws:
        call.apply(normalise_update(raw))
    return call


def test_tool_call_shows_kind_title_status_locations_and_content():
    call = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "c",
            "title": "Edit notes.py",
            "kind": "edit",
            "locations": [{"path": "/p/notes.py", "line": 4}],
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c",
            "status": "completed",
            "content": [{"type": "diff", "path": "/p/notes.py", "oldText": OLD, "newText": NEW}],
        },
    )
    out, attachments = render.tool_call(call)
    assert out.body.split("\n")[:2] == ["✏️ Edit notes.py — ✅ done", "Where: /p/notes.py:4"]
    assert "+B" in out.body and attachments == []
    run = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "r",
            "title": "Run tests",
            "kind": "execute",
            "status": "in_progress",
            "content": [{"type": "terminal", "terminalId": "t"}],
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "r",
            "_meta": {"terminal_output": {"terminal_id": "t", "data": "ok\n"}},
        },
    )
    out, _ = render.tool_call(run)
    assert out.body == "▶️ Run tests — 🔄 running\n```\nok\n```\n🔄 still running…"
    # output announced only in _meta, no terminal content item: still shown, once
    meta_only = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "m",
            "title": "ls",
            "kind": "execute",
            "_meta": {
                "terminal_output": {"terminal_id": "t9", "data": "a\n"},
                "terminal_exit": {"terminal_id": "t9", "exit_code": 0},
            },
        }
    )
    assert render.tool_call(meta_only)[0].body.count("```\na\n```") == 1
    big = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "b",
            "title": "Rewrite",
            "kind": "edit",
            "content": [
                {"type": "diff", "path": "/p/x.py", "oldText": "", "newText": "".join(f"{i}\n" for i in range(600))}
            ],
        }
    )
    out, attachments = render.tool_call(big)
    assert [a.filename for a in attachments] == ["x.py.diff"] and "attached as a file" in out.body


def opencode_bash(output: str, exit_code, status: str = "completed") -> ToolCall:
    """A command as OpenCode 1.18 reports it: its output as text content while it runs and when
    it is done, the exit code only in rawOutput.metadata.exit."""
    text = {"type": "content", "content": {"type": "text", "text": output}}
    return fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_b",
            "title": "seq 1 3000",
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": "seq 1 3000"},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call_b",
            "status": "in_progress",
            "kind": "execute",
            "content": [text],
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "call_b",
            "status": status,
            "content": [text],
            "rawOutput": {"output": output, "metadata": {"output": output, "exit": exit_code, "truncated": False}},
        },
    )


def test_a_command_sent_as_text_shows_its_tail_and_exit_status():
    output = "".join(f"{i}\n" for i in range(1, 3001))
    out, _ = render.tool_call(opencode_bash(output, 3))
    lines = out.body.split("\n")
    assert lines[0] == "▶️ seq 1 3000 — ✅ done"
    assert lines[1] == "… 2985 earlier lines" and lines[3] == "2986" and lines[-3] == "3000"
    assert lines[-1] == "❌ exit code 3" and "\n127\n" not in out.body
    assert "<pre><code>2986\n" in out.html
    assert render.tool_call(opencode_bash("ok\n", 0))[0].body.endswith("```\nok\n```\n✅ exit code 0")
    stopped = render.tool_call(
        opencode_bash("1\n\n<shell_metadata>\nUser aborted the command\n</shell_metadata>", None)
    )
    assert stopped[0].body.endswith("</shell_metadata>\n```\n⏹ ended")
    # while it runs: the tail so far, no exit status yet
    running = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "x",
            "title": "make",
            "kind": "execute",
            "status": "in_progress",
            "content": [{"type": "content", "content": {"type": "text", "text": "a\nb\n"}}],
        }
    )
    assert render.tool_call(running)[0].body == "▶️ make — 🔄 running\n```\na\nb\n```\n🔄 still running…"
    # other tools' text is still their text, cut at its head
    read = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "r",
            "title": "Read a.py",
            "kind": "read",
            "content": [{"type": "content", "content": {"type": "text", "text": "x" * 3000}}],
        }
    )
    assert "🔄 still running" not in render.tool_call(read)[0].body


def todowrite(*todos, title: str = "todowrite", status: str = "in_progress") -> list[dict]:
    """OpenCode 1.18's todowrite as it reports it: pending with the tool's name and no input, then
    the input, then done with its own title and the list as JSON output (never an ACP plan)."""
    items = [{"content": c, "status": s, "priority": p} for c, s, p in todos]
    return [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "t1",
            "title": "todowrite",
            "kind": "other",
            "status": "pending",
            "rawInput": {},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "status": status,
            "kind": "other",
            "title": "todowrite",
            "rawInput": {"todos": items},
        },
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "status": "completed",
            "title": title,
            "content": [{"type": "content", "content": {"type": "text", "text": "[...]"}}],
            "rawOutput": {"output": json.dumps(items), "metadata": {"todos": items}},
        },
    ]


def test_a_todo_tool_is_a_plan_by_another_name():
    raws = todowrite(
        ("Write hello.py", "completed", "high"),
        ("Run it", "in_progress", "medium"),
        ("Tidy", "cancelled", "low"),
        title="3 todos",
    )
    first = fold(raws[0])
    assert first.todo and first.todos is None  # known by its name before its input is
    call = fold(*raws)
    assert call.todos == [
        PlanEntry("Write hello.py", "high", "completed"),
        PlanEntry("Run it", "medium", "in_progress"),
        PlanEntry("Tidy", "low", "cancelled"),
    ]
    out = render.plan(call.todos, "To-do list")
    assert out.body.split("\n") == [
        "📋 To-do list (1/3 done)",
        "✅ Write hello.py · high priority",
        "🔄 Run it",
        "✖️ Tidy · low priority",
    ]
    assert "<del>Tidy</del>" in out.html
    # known by its input alone (another name), and from its output when the input never came
    other = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "w",
            "title": "Update the list",
            "rawInput": {"todos": [{"description": "Read", "status": "pending"}]},
        }
    )
    assert other.todos == [PlanEntry("Read", "medium", "pending")]
    late = fold(
        {"sessionUpdate": "tool_call", "toolCallId": "l", "title": "write_todos"},
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "l",
            "status": "completed",
            "rawOutput": {"output": json.dumps([{"content": "A", "status": "completed"}])},
        },
    )
    assert late.todos == [PlanEntry("A", "medium", "completed")]
    assert not fold({"sessionUpdate": "tool_call", "toolCallId": "x", "title": "Read todo.md"}).todo


def test_exit_of_reads_the_usual_places():
    from acp.toolcalls import exit_of

    assert exit_of({"output": "", "metadata": {"exit": 2}}) == (2, None)
    assert exit_of({"exitCode": 0}) == (0, None)
    assert exit_of({"exit_code": None, "signal": "SIGTERM"}) == (None, "SIGTERM")
    assert exit_of({"metadata": {"exit": True}}) == (None, None)  # not a number: no code
    assert exit_of({"output": "x"}) is None and exit_of("text") is None and exit_of(None) is None


def test_permission_shows_the_diff_or_the_command_and_labels_options_by_kind():
    options = [
        {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
        {"optionId": "always", "name": "Allow always", "kind": "allow_always"},
        {"optionId": "no", "name": "No", "kind": "reject_once"},
        {"optionId": "never", "name": "Never", "kind": "reject_always"},
    ]
    out, _ = render.permission(
        "Coder",
        {
            "toolCallId": "e",
            "title": "Edit notes.py",
            "kind": "edit",
            "content": [{"type": "diff", "path": "/p/notes.py", "oldText": OLD, "newText": NEW}],
        },
        options,
    )
    lines = out.body.split("\n")
    assert lines[0] == "🔐 Coder asks permission: ✏️ Edit notes.py"
    assert "+B" in out.body and "```diff" in out.body
    assert lines[-6:-2] == [
        "1. ✅ Allow once — Yes",
        "2. ✅ Allow always",
        "3. ❌ Reject once — No",
        "4. 🚫 Reject always — Never",
    ]
    assert out.html.count("<li>") == 4
    run, _ = render.permission(
        "Coder",
        {"toolCallId": "r", "title": "Run", "kind": "execute", "rawInput": {"command": ["pytest", "-q"]}},
        options[:1],
    )
    assert "Command: `pytest -q`" in run.body
    # a request that names only the call: what the turn saw of it is shown
    known = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "k",
            "title": "Write a.py",
            "kind": "edit",
            "content": [{"type": "diff", "path": "/p/a.py", "oldText": None, "newText": "x\n"}],
        }
    )
    out, _ = render.permission("Coder", {"toolCallId": "k"}, options[:1], known)
    assert "Write a.py" in out.body and "new file" in out.body


def test_html_is_sanitised_whatever_the_agent_sends():
    evil = "<img src=x onerror=alert(1)><script>alert(2)</script>"
    call = fold(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "x",
            "title": evil,
            "kind": "edit",
            "content": [{"type": "diff", "path": evil, "oldText": evil, "newText": "y"}],
        }
    )
    outs = [
        render.tool_call(call)[0],
        render.plan([PlanEntry(evil)]),
        render.permission(evil, {"toolCallId": "x", "title": evil}, [{"optionId": "o", "name": evil}])[0],
        render.setting_change(evil, "mode", evil, evil),
    ]
    for out in outs:
        tags = Tags()
        tags.feed(out.html)
        assert tags.seen and not tags.seen & {"script", "img", "iframe"}, tags.seen
        assert not tags.handlers, tags.handlers  # the agent's markup is text, never markup


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.seen, self.handlers = set(), []

    def handle_starttag(self, tag, attrs):
        self.seen.add(tag)
        self.handlers += [name for name, _ in attrs if name.startswith("on")]


def test_setting_changes_choices_and_status_lines():
    assert render.setting_change("Coder", "mode", "Ask", "Plan").body == "🔀 Coder: mode Ask → Plan"
    assert (
        render.setting_change("Coder", "mode", "Plan", "Code", by_agent=True).body
        == "🔀 Coder switched mode to Plan → Code"
    )
    listed = render.choices_list("Coder", "mode", "plan", [("ask", "Ask", ""), ("plan", "Plan", "No changes")])
    assert listed.body.split("\n") == ["Coder — mode:", "· ask (Ask)", "▶ plan (Plan) — No changes (current)"]
    out = render.status(
        [
            render.StatusLine(
                "Coder", "answering", "Plan", "Large", 52000, 200000, 0.42, "USD", "Refactor the greeter"
            ),
            render.StatusLine("Local", "stopped"),
        ]
    )
    assert out.body.split("\n") == [
        "Coder: answering · mode Plan · model Large · context 52k/200k (26%) · cost $0.42 · “Refactor the greeter”",
        "Local: stopped",
    ]
    assert render.status([]).body == "No agents in this channel."
    assert render.tokens(1_500_000) == "1.5M" and render.money(3, "CHF") == "3.00 CHF"


def test_elicitation_is_a_numbered_message_and_url_mode_shows_the_host_first():
    form = parse_request(
        {
            "sessionId": "s",
            "mode": "form",
            "message": "A few details",
            "requestedSchema": {
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "title": "Project name"},
                    "count": {"type": "integer", "minimum": 1, "maximum": 10},
                    "colour": {
                        "type": "string",
                        "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}],
                    },
                    "go": {"type": "boolean", "default": True},
                },
            },
        }
    )
    out = render.elicitation("Coder", form)
    lines = out.body.split("\n")
    assert lines[0] == "❓ Coder asks: A few details"
    assert lines[1:6] == [
        "1. Project name (text)",
        "2. count (a whole number, 1–10; optional)",
        "3. colour (one of; optional)",
        "   a) Red  b) Green",
        "4. go (yes / no; default yes; optional)",
    ]
    assert lines[-1] == "Reply to this message, one line per question: `1. answer`; `decline` to refuse."
    url = parse_request(
        {
            "sessionId": "s",
            "mode": "url",
            "message": "Log in",
            "elicitationId": "e",
            "url": "https://login.example.com/authorize?state=secret",
        }
    )
    consent = render.url_consent("Coder", url)
    assert "login.example.com" in consent.body and "state=secret" not in consent.body + consent.html
    assert "state=secret" in render.url_link(url).body
    bad = parse_request(
        {"sessionId": "s", "mode": "url", "message": "x", "elicitationId": "e", "url": "javascript:alert(1)"}
    )
    assert "javascript" not in render.url_link(bad).html


def test_stop_reasons_end_with_one_line():
    for reason in ("max_tokens", "max_turn_requests", "refusal"):
        line = render.stop_reason(reason)
        assert line and "\n" not in line
    assert render.stop_reason("end_turn") is None and render.stop_reason("cancelled") is None


def test_status_names_the_session_by_title_and_its_id_only_when_asked():
    line = render.StatusLine(
        "Coder", "ready", model="Large", used=10, size=100, cost=0.1, currency="USD", title="Fix it", session="ses_42"
    )
    assert render.status_text(line) == "Coder: ready · model Large · context 10/100 (10%) · cost $0.10 · “Fix it”"
    assert render.status_text(line, ids=True).endswith("“Fix it” · session ses_42")


def test_status_says_what_the_agent_did_not_report():
    local = render.StatusLine("SmolLM2", "ready", used=312, size=8192, session="s1")
    assert (
        render.status_text(local) == "SmolLM2: ready · context 312/8.2k (4%) · no model or cost reported by this agent"
    )
    silent = render.StatusLine("Echo", "ready", session="s2")
    assert render.status_text(silent).endswith("no model, context or cost reported by this agent")
    assert render.status_text(render.StatusLine("Local", "stopped")) == "Local: stopped"  # no session: nothing to say
