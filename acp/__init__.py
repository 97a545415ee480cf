"""ACP client for Sidekicks for Matrix: agent processes, JSON-RPC, sessions, slots.

Never imports Matrix, the store or the configuration: the bridge passes plain
AgentSpec values in and gets plain values and callbacks out.
"""

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
