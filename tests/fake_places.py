"""Where agents work as configured: coding/workplaces.py's `where` without `!cwd` or worktrees,
for unit tests that build a portal's parts by hand."""

from __future__ import annotations

from types import SimpleNamespace


class ConfiguredPlaces:
    def __init__(self, config):
        self.config = config

    async def where(self, portal, agent_name, conversation=""):
        return SimpleNamespace(cwd=self.config.agents[agent_name].cwd, additional=())
