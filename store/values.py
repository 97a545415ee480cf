"""A few values: the commands each agent announced (`sk_agent_command`) and the key-value table
(`sk_value`, its keys named in keys.py)."""

from __future__ import annotations

import json

from .core import Part, operation


class Values(Part):
    @operation
    def set_agent_commands(self, agent: str, commands: list[dict]) -> None:
        A = self.core.models.AgentCommand
        A.insert(agent=agent, commands=json.dumps(list(commands))).on_conflict(
            conflict_target=[A.agent], preserve=[A.commands]
        ).execute()

    @operation
    def agent_commands(self, agent: str) -> list[dict] | None:
        A = self.core.models.AgentCommand
        row = A.select(A.commands).where(A.agent == agent).tuples().first()
        return json.loads(row[0]) if row else None

    @operation
    def set_value(self, key: str, value: str) -> None:
        V = self.core.models.Value
        # its SQL written once (compiled.py): a pending prompt of an ACP client is written so
        upsert = self.core.compiled(
            "set value",
            lambda key, value: V.insert(key=key, value=value).on_conflict(conflict_target=[V.key], preserve=[V.value]),
            "key",
            "value",
        )
        upsert.run(key=key, value=value)

    @operation
    def get_value(self, key: str) -> str | None:
        rows = self.core.queries.get_value.rows(key=key)
        return rows[0][0] if rows else None

    @operation
    def delete_value(self, key: str) -> None:
        V = self.core.models.Value
        V.delete().where(V.key == key).execute()
