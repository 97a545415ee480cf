"""A hostile ACP agent for tests: `python tests/agents/hostile_agent.py [--log FILE]`.

A real ACP agent over stdio (acp.agent_kit) that does what a steered agent might: asks the
bridge to post any file, writes answers too big for an event, HTML that grows on escaping, a
catastrophic regular expression, a thousand commands, random updates. Each prompt does what its
directives say (several may be given); without one, it echoes.

Directives inside the prompt text
  [[link:URI]]        a resource_link to URI (repeat for several), then "links sent"
  [[markdown:N]]      an answer of N characters of Markdown (headings, lists, bold, code), in
                      chunks of 1,000 characters
  [[amps:N]]          an answer of N characters, mostly `&` and `<` in bold (its HTML is ~5× its text)
  [[bytes:N]]         an answer of N bytes of plain text, in chunks of 64 KiB, as fast as it can
  [[pattern:NAME]]    an elicitation whose field has a catastrophic pattern (`^(a+)+$`); the
                      answer says what came back
  [[commands:N]]      available_commands_update with N commands, then "N commands"
  [[fuzz:SEED:N]]     N random session/update notifications (random kinds, sizes, nesting,
                      unicode), then "fuzz SEED done: " and the prompt's text
  [[answer:TEXT]]     answer TEXT
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `acp`

from acp.agent_kit import AgentBase, Turn, run  # noqa: E402

DIRECTIVE = re.compile(r"\[\[([a-z-]+)(?::([^\]]*))?\]\]")
CATASTROPHIC = "^(a+)+$"


def markdown(size: int) -> str:
    block = (
        "## Section\n\nSome **bold** text, some *emphasis*, `code` and a [link](https://example.org).\n\n"
        "- one item\n- another item with `x < y`\n\n```python\nprint('hello')\n```\n\n"
    )
    return (block * (size // len(block) + 1))[:size]


def amps(size: int) -> str:
    line = "**" + "&<&>&" * 12 + "**\n\n"  # bold, so it has HTML: &amp; &lt; &gt; weigh 4-5
    return (line * (size // len(line) + 1))[:size]


def fuzz_update(rng: random.Random, depth: int = 0):
    """A random JSON value: an update that may or may not look like ACP."""
    kinds = [
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "available_commands_update",
        "current_mode_update",
        "usage_update",
        "session_info_update",
        "user_message_chunk",
        "config_option_update",
        "nonsense",
        "",
        None,
        7,
    ]
    pick = rng.random()
    if depth > 3 or pick < 0.3:
        return rng.choice(
            [
                None,
                True,
                -1,
                2**70,
                1.5e308,
                "",
                "x" * rng.randint(0, 5000),
                "\u202e\U0001f600\x00\ud7ff" * rng.randint(0, 50),
                [],
                {},
            ]
        )
    if pick < 0.5:
        return [fuzz_update(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    value = {"sessionUpdate": rng.choice(kinds)}
    for key in rng.sample(
        [
            "content",
            "toolCallId",
            "title",
            "status",
            "entries",
            "availableCommands",
            "currentModeId",
            "used",
            "size",
            "kind",
            "locations",
            "rawInput",
            "text",
            "type",
            "data",
            "uri",
            "mimeType",
        ],
        rng.randint(0, 6),
    ):
        value[key] = fuzz_update(rng, depth + 1)
    if rng.random() < 0.5:
        value["content"] = {
            "type": rng.choice(["text", "image", "resource", "resource_link", "audio", "x"]),
            "text": fuzz_update(rng, depth + 1),
            "uri": rng.choice(["file:///etc/passwd", "file:///dev/zero", "https://e.example/", "x", 3]),
            "data": rng.choice(["", "!!", "aGVsbG8=", 5]),
        }
    return value


class Hostile(AgentBase):
    def __init__(self, opts: argparse.Namespace):
        super().__init__()
        self.opts = opts
        self.name, self.version = "hostile", "1.0"

    def received(self, message: dict) -> None:
        if self.opts.log:
            with open(self.opts.log, "a", encoding="utf-8") as log:
                log.write(json.dumps(message) + "\n")

    async def prompt(self, turn: Turn) -> str:
        said = []
        for name, value in DIRECTIVE.findall(turn.text):
            if name == "link":
                await turn.update(
                    {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "resource_link", "uri": value, "name": Path(value).name or "file"},
                    }
                )
                said.append("link")
            elif name == "markdown":
                text = markdown(int(value))
                for at in range(0, len(text), 1000):
                    await turn.say(text[at : at + 1000])
                said.append("markdown")
            elif name == "amps":
                text = amps(int(value))
                for at in range(0, len(text), 4000):
                    await turn.say(text[at : at + 4000])
                said.append("amps")
            elif name == "bytes":
                line = ("0123456789abcdef" * 4 + "\n") * 1024  # 65 KiB
                left = int(value)
                while left > 0:
                    await turn.say(line[:left])
                    left -= len(line)
                said.append("bytes")
            elif name == "pattern":
                answer = await turn.elicit(
                    "Your code?",
                    {
                        "type": "object",
                        "properties": {"code": {"type": "string", "pattern": CATASTROPHIC}},
                        "required": ["code"],
                    },
                )
                await turn.say(f"elicitation: {json.dumps(answer)}")
                said.append("pattern")
            elif name == "commands":
                count = int(value)
                self.send_commands(
                    turn.session_id, [{"name": f"cmd{i}", "description": f"command {i}"} for i in range(count)]
                )
                await turn.say(f"{count} commands")
                said.append("commands")
            elif name == "fuzz":
                seed, _, count = value.partition(":")
                rng = random.Random(int(seed))
                for _ in range(int(count or 50)):
                    update = fuzz_update(rng)
                    self.conn.notify("session/update", {"sessionId": turn.session_id, "update": update})
                await turn.say(f"fuzz {seed} done: {turn.text}")  # what it read: where it should go
                said.append("fuzz")
            elif name == "answer":
                await turn.say(value)
                said.append("answer")
        if "link" in said:
            await turn.say("links sent")
        if not said:
            await turn.say("echo: " + turn.text)
        return "end_turn"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--log")
    run(Hostile(p.parse_args()))


if __name__ == "__main__":
    main()
