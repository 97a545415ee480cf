"""ACP client for Sidekicks for Matrix: agent processes, JSON-RPC, sessions, slots.

Never imports Matrix, the store or the configuration: the bridge passes plain
AgentSpec values in and gets plain values and callbacks out.

The names below are imported when first used, not with the package: the shipped local agent
(`python -m acp.agents.local_model`) lives in this package too and needs none of the client's
modules, which were a third of its start (docs/performance.md "The local agent's first token").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import (
        CODING_CLIENT_CAPABILITIES,
        Agent,
        AgentSpec,
        Applied,
        PermissionRequest,
        SessionCapabilities,
        SessionInfo,
        start_agent,
    )
    from .elicitation import ElicitationAnswer, ElicitationRequest
    from .errors import AcpError, AgentCrashed, AgentStartError, AgentStopped, AgentTimeout, AuthRequired, RpcError
    from .session_state import Choices, SessionState
    from .slots import Pool
    from .toolcalls import PlanEntry, ToolCall
    from .updates import Update

# each public name → the module it comes from
_HOME = {
    **dict.fromkeys(
        (
            "CODING_CLIENT_CAPABILITIES",
            "Agent",
            "AgentSpec",
            "Applied",
            "PermissionRequest",
            "SessionCapabilities",
            "SessionInfo",
            "start_agent",
        ),
        "client",
    ),
    **dict.fromkeys(("ElicitationAnswer", "ElicitationRequest"), "elicitation"),
    **dict.fromkeys(
        ("AcpError", "AgentCrashed", "AgentStartError", "AgentStopped", "AgentTimeout", "AuthRequired", "RpcError"),
        "errors",
    ),
    **dict.fromkeys(("Choices", "SessionState"), "session_state"),
    "Pool": "slots",
    **dict.fromkeys(("PlanEntry", "ToolCall"), "toolcalls"),
    "Update": "updates",
}

__all__ = [
    "AcpError",
    "Agent",
    "AgentCrashed",
    "AgentSpec",
    "AgentStartError",
    "AgentStopped",
    "AgentTimeout",
    "Applied",
    "AuthRequired",
    "CODING_CLIENT_CAPABILITIES",
    "Choices",
    "ElicitationAnswer",
    "ElicitationRequest",
    "PermissionRequest",
    "PlanEntry",
    "Pool",
    "RpcError",
    "SessionCapabilities",
    "SessionInfo",
    "SessionState",
    "ToolCall",
    "Update",
    "start_agent",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # the next use finds it at once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
