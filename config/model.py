"""The validated configuration, as plain dataclasses the rest of the program reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class SandboxConfig:
    """`sandbox:` of an agent (docs/sandbox.md): on by default; `write`/`read` paths absolute
    (`~` expanded, relative to the config file), `network` on unless the config says off."""

    on: bool = True
    write: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    network: bool = True
    host_ports: tuple[int, ...] = ()  # `network: {host_ports: [N]}`: the host's 127.0.0.1:N reached


@dataclass(frozen=True)
class AgentConfig:
    name: str
    title: str
    command: tuple[str, ...]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 300.0
    # the bridge's MCP server `matrix` in its sessions (bridge/mcp): history, send_file, react,
    # schedule… (`tools: on | off`)
    tools: bool = True
    # the folders `!cwd` may move the agent to, each with what is below it (`roots:`; by default
    # its `cwd`); the others are a session's additionalDirectories where the agent announces them
    roots: tuple[str, ...] = ()
    # each thread works in a git worktree of its own, on a branch named after the thread
    # (`worktrees: on`; needs a `cwd` inside a git checkout): bridge/coding/worktrees.py
    worktrees: bool = False
    # what it may cost a day or a month (`budget:`; None: no cap): channels/commands/budgets.py
    budget: Budget | None = None
    # the bubblewrap sandbox the agent runs in (`sandbox: on | off | {write, read, network}`)
    sandbox: SandboxConfig = SandboxConfig()
    # the puppet's picture (`avatar:`): an http(s) URL or an absolute file path of a PNG, JPEG,
    # GIF or WebP; None: a generated one (bridge/matrix/avatars.py)
    avatar: str | None = None


@dataclass(frozen=True)
class Budget:
    """`budget: {cost: 5.00, per: day}`: what an agent may cost a day or a month (UTC), in the
    currency it reports (docs/sessions.md, "Usage and budgets")."""

    cost: float
    per: str  # "day" | "month"


@dataclass(frozen=True)
class Config:
    path: Path
    owners: tuple[str, ...]
    domain: str
    homeserver_url: str
    homeserver_embedded: bool
    homeserver_port: int
    listen_host: str
    listen_port: int
    appservice_id: str
    puppet_prefix: str
    bot: str
    registration_path: Path
    agents: dict[str, AgentConfig]
    agents_in_memory: int
    context_messages: int
    context_chars: int
    database: str
    data_dir: Path
    permission_timeout: float = 600.0
    public_url: str | None = None  # how the homeserver reaches the appservice, if not `listen`
    # The homeserver's own homeserver.yaml when it is readable on this machine (homeserver.config):
    # its app_service_config_files are checked for registrations that claim the same users.
    homeserver_config: Path | None = None
    # the largest attachment passed between the owner and an agent, either way (limits.attachment_mib)
    attachment_bytes: int = 10 * 1024 * 1024
    # the agents' MCP tools (bridge/mcp): calls per turn, messages one `history` call returns,
    # active schedules per conversation
    tool_calls_per_turn: int = 30
    history_messages: int = 100
    schedules_per_conversation: int = 20
    # hand-offs (the `handoff` tool) in a chain started by one owner message (limits.handoffs)
    handoffs: int = 3
    # end-to-end encryption (`encryption: on | off`): each identity its own device (bridge/e2ee)
    encryption: bool = True
    # the homeserver sends the appservice its users' crypto traffic in transactions (MSC2409
    # to-device, MSC3202 key counts and device lists: `homeserver.device_traffic`, by default
    # on for the embedded homeserver, which the bridge configures so): the bot's device reads
    device_traffic: bool = False
    # voice notes (`voice`, `voice_language`, `voice_max_seconds`: docs/voice.md)
    voice: VoiceConfig = field(default_factory=lambda: VoiceConfig())
    # the ACP agent registry `agents add` and `!agents add` read (`registry:`, a URL or a file;
    # None: the published one): config/agent_registry.py
    registry: str | None = None

    @property
    def bot_user_id(self) -> str:
        return f"@{self.bot}:{self.domain}"

    def puppet_user_id(self, agent: str) -> str:
        return f"@{self.puppet_prefix}{agent}:{self.domain}"

    def agent_for_user_id(self, user_id: str) -> str | None:
        """The agent a puppet user id stands for, or None (also for agents no longer configured)."""
        prefix, suffix = f"@{self.puppet_prefix}", f":{self.domain}"
        if not (user_id.startswith(prefix) and user_id.endswith(suffix)):
            return None
        name = user_id[len(prefix) : -len(suffix)]
        return name if name in self.agents else None

    @property
    def appservice_url(self) -> str:
        if self.public_url:
            return self.public_url
        host = "127.0.0.1" if self.listen_host in ("0.0.0.0", "::") else self.listen_host
        return f"http://{host}:{self.listen_port}"


@dataclass(frozen=True)
class VoiceConfig:
    """Voice notes (docs/voice.md): `enabled` None is on where the engine is installed."""

    enabled: bool | None = None
    language: str = "en"
    max_seconds: int = 300
