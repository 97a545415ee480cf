"""`sidekicks check`: start each configured agent once and report what it announces."""
from __future__ import annotations

import asyncio

from acp import AcpError, AgentSpec, start_agent


async def check_agents(cfg, say) -> int:
    count = len(cfg.agents)
    say(f"{cfg.path}: configuration is valid ({count} agent{'s' if count != 1 else ''})")
    failures = 0
    for name, agent in cfg.agents.items():
        spec = AgentSpec(name=name, command=list(agent.command), cwd=agent.cwd, env=dict(agent.env),
                         title=agent.title, timeout=agent.timeout)
        commands: list[dict] = []
        running = None
        try:
            running = await asyncio.wait_for(
                start_agent(spec, on_commands=lambda _n, c: commands.__setitem__(slice(None), c)), 60)
            if not commands:
                # most agents announce their commands right after session/new
                await asyncio.wait_for(running.new_session(agent.cwd), 30)
                for _ in range(10):
                    if commands or running.commands:
                        break
                    await asyncio.sleep(0.1)
            info = running.info or {}
            names = ", ".join("/" + c.get("name", "?") for c in (commands or running.commands or [])) or "none"
            say(f"✓ {name}: {info.get('name', '?')} {info.get('version', '')}".rstrip()
                + f"; loadSession: {'yes' if running.load_session else 'no'}; commands: {names}")
        except (AcpError, asyncio.TimeoutError, OSError, ValueError) as exc:
            failures += 1
            reason = str(exc) or "no answer within 60 s"
            if reason.startswith(f"{name}: "):  # ACP errors already name their agent
                reason = reason[len(name) + 2:]
            say(f"✗ {name}: {reason}")
        finally:
            if running is not None:
                await running.stop()
    return 1 if failures else 0
