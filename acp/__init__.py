"""ACP client for Sidekicks for Matrix: agent processes, JSON-RPC, sessions, slots.

Never imports Matrix, the store or the configuration: the bridge passes plain
AgentSpec values in and gets plain values and callbacks out.
"""

from .client import Agent, AgentSpec, PermissionRequest, start_agent
from .errors import (AcpError, AgentCrashed, AgentStartError, AgentStopped, AgentTimeout,
                     AuthRequired, RpcError)
from .slots import Pool
from .updates import Update

__all__ = [
    "AcpError", "Agent", "AgentCrashed", "AgentSpec", "AgentStartError", "AgentStopped",
    "AgentTimeout", "AuthRequired", "PermissionRequest", "Pool", "RpcError", "Update", "start_agent",
]
