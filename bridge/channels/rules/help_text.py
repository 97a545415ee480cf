"""The words of `!help`: a short answer to "what can I do here" for the room it is typed in, and
every command with `!help all`; as plain text and as HTML (docs/commands.md). Pure: no Matrix,
no store (tests/unit/channels/rules/test_help_text.py).

The bot's own commands are told only in its DM; a channel's help names the room's agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape


@dataclass(frozen=True)
class Section:
    title: str
    items: tuple[tuple[str, str], ...]  # (what to type, what it does)
    note: str = ""


@dataclass(frozen=True)
class Help:
    body: str  # the plain text: no Markdown, read as it is
    html: str  # the same as HTML (formatted_body)


BOT_DM = Section(
    "Here, in my DM:",
    (
        ("!agents", "the agents and what each is doing"),
        ("!agents add ID [--cwd DIR]", "add an agent from the ACP agent registry (no restart)"),
        ("!agents remove NAME", "take an agent out of the config; it leaves its rooms"),
        ("!channels", "the channels and their members"),
        (
            "!new NAME AGENT...",
            'a new channel with these agents (a name with spaces in quotes: !new "code review" alice bob)',
        ),
        ("!dm AGENT", "a direct channel with one agent"),
        ("!delete CHANNEL", "delete a channel and its history (asks you to confirm)"),
    ),
)

IN_A_CHANNEL = Section(
    "In a channel:",
    (
        ("!stop", "stop the answer being written (in a thread: that thread's)"),
        ("!commands", "the slash commands of the channel's agents"),
        ("!status [ids]", "each agent's state, mode, model, context used, cost and session (ids: the session ids too)"),
        ("!mode [AGENT] [MODE]", "see or change an agent's mode (ask, plan, code… as the agent offers)"),
        ("!model [AGENT] [MODEL]", "see or change an agent's model"),
        ("!config [AGENT] [OPTION VALUE]", "see or change the agent's other options"),
        ("!schedules", "the work agents scheduled here (their schedule tool)"),
        ("!unschedule N", "cancel schedule N"),
        ("!cwd [AGENT] [PATH]", "see or change where an agent works here (only inside its configured roots)"),
        ("!worktrees", "the threads' git worktrees (agents with worktrees: on); !worktrees remove N confirm"),
        ("!sessions [AGENT]", "the agents' sessions in this conversation; !sessions [AGENT] delete N deletes one"),
        ("!resume [AGENT] N", "go back to session N of !sessions"),
        ("!reset [AGENT]", "start a new session here"),
        ("!fork [AGENT]", "go on with a copy of the session in a new thread"),
        ("!threads [on|off]", "on: each message agents answer gets its answers in a thread under it"),
        ("!handoffs [on|off]", "off: the agents here cannot hand work to each other (on by default)"),
        ("!voice [on|off]", "on: the agents' answers here come also as voice notes"),
        ("!approve [requester|any-owner]", "who answers the agents' permission prompts and questions"),
        ("!queue", "the messages waiting for an answer here; !drop N removes one"),
        ("!steer TEXT", "redirect the answer being written (or reply to it): asked again with TEXT"),
        ("!budget [AGENT] [raise AMOUNT]", "an agent's budget and what it spent (raise: for this period)"),
        ("!budget channel [COST per day|month | raise AMOUNT | off]", "this channel's budget, for all its agents"),
        ("!delete", "delete the channel's history (asks you to confirm)"),
    ),
    "With one agent in the channel, AGENT may be left out; choices stay across restarts.",
)

TALKING = Section(
    "Talking to agents in a channel:",
    (
        ("@alice how are you?", "alice answers; several mentions answer one after the other"),
        ("/alice:review main.py", 'sends "/review main.py" to alice alone'),
        ("@alice /review main.py", "the same, for clients that swallow unknown slash commands"),
        ("//alice:review main.py", 'the same again (Element asks "Send as message" otherwise)'),
    ),
    "With no mention, the agent who spoke last answers. In a thread all of this holds inside the "
    "thread; a command typed there acts on that thread (its answer, its sessions).",
)

INTRO = 'Sidekicks bridge commands (they start with "!"; "/" belongs to the agents)'
ALL = "!help all lists every command."


def render(lead: str, sections: Sequence[Section], end: str = "", spaced: bool = True) -> Help:
    """`lead`, each section (its title, one line an item, its note), then `end`; `spaced`: an
    empty line before each section and the end (a short help has none)."""
    gap = [""] if spaced else []
    lines, html = [lead], [f"<p>{escape(lead)}</p>"]
    for section in sections:
        lines.extend(gap)
        if section.title:
            lines.append(section.title)
        lines.extend(f"  {typed} — {does}" for typed, does in section.items)
        items = "".join(f"<li><code>{escape(typed)}</code> — {escape(does)}</li>" for typed, does in section.items)
        title = f"<p><strong>{escape(section.title)}</strong></p>" if section.title else ""
        html.append(f"{title}<ul>{items}</ul>")
        if section.note:
            lines.append(section.note)
            html.append(f"<p>{escape(section.note)}</p>")
    if end:
        lines.extend([*gap, end])
        html.append(f"<p>{escape(end)}</p>")
    return Help("\n".join(lines), "".join(html))


def full_help() -> Help:
    """`!help all` in the bot's DM: every command, the bot's and a channel's."""
    return render(INTRO, (BOT_DM, IN_A_CHANNEL, TALKING))


def channel_full_help() -> Help:
    """`!help all` in a channel: every command of a channel, none of the bot's."""
    return render(INTRO, (IN_A_CHANNEL, TALKING), "The bridge's own commands (!new, !dm…) are in my DM: !help there.")


def bot_help() -> Help:
    """`!help` in the bot's DM: what to do here first, in a few lines."""
    short = Section(
        "",
        (
            ("!agents", "the agents and what each is doing"),
            ("!new NAME AGENT...", "a new channel with these agents"),
            ("!dm AGENT", "a direct chat with one agent"),
            ("!channels", "your channels; !delete CHANNEL deletes one"),
        ),
    )
    return render(
        "Sidekicks shows the agents on this computer as Matrix users. Here, in my DM:",
        (short,),
        "In a channel, mention an agent (@name hello) and type !help there for its commands. " + ALL,
        spaced=False,
    )


def room_help(place: str, agents: Sequence[str], direct: bool) -> Help:
    """`!help` in a channel: this room's commands first, in a few lines. `place`: how the room
    is named ("#test", "your direct chat with local"); `agents`: its members' names."""
    first = agents[0] if agents else "AGENT"
    if direct:
        talk = ("anything", f"{first} answers everything written here")
    elif len(agents) > 1:
        talk = (f"@{first} hello", "that agent answers; with no mention, the one who spoke last")
    else:
        talk = (f"@{first} hello", f"{first} answers; with no mention too")
    here = Section(
        "",
        (
            talk,
            (f"/{first}:COMMAND", "one of its slash commands (!commands lists them)"),
            ("!stop", "stop the answer being written; !status: the agents' state"),
            ("!sessions, !reset, !fork", "the sessions of this conversation"),
            ("!threads on", "each answer in a thread under its message"),
        ),
    )
    return render(f"What you can do in {place}:", (here,), "!help all lists every command of a channel.", spaced=False)


def welcome_text(agent_title: str, link: str | None) -> Help:
    """The bot's first words to a new owner at `sidekicks up`: what Sidekicks is, the direct
    chat with the first agent (`link`, None: no agent), how to reach several, `!help`."""
    lines = ["Welcome to Sidekicks: the AI agents on this computer are Matrix users here."]
    html = [f"<p>{escape(lines[0])}</p>"]
    if link is not None:
        lines.append(f"{agent_title} invited you to a direct chat: write anything there and it answers. {link}")
        html.append(
            f'<p>{escape(agent_title)} invited you to a <a href="{escape(link)}">direct chat</a>: '
            "write anything there and it answers.</p>"
        )
    several = "For several agents at once, make a channel (!new NAME AGENT...) and mention one (@name hello)."
    lines.extend([several, "!help says what you can do here."])
    html.extend([f"<p>{escape(several)}</p>", "<p><code>!help</code> says what you can do here.</p>"])
    return Help("\n".join(lines), "".join(html))
