"""The bridge's own MCP server, `matrix`, offered to every agent session
(docs/architecture.md "MCP tools and schedules").

- `tools.py` (pure): the tools' names, descriptions and argument schemas, argument checking,
  and how results read.
- `wire.py` (pure): the lines `sidekicks mcp` and the bridge exchange over the private socket.
- `stdio.py`: `sidekicks mcp`, the stdio MCP server (official `mcp` SDK) an agent starts from
  its `mcpServers` entry; each tool call goes to the running bridge over the socket.
- `service.py`: the bridge's side — the socket (0600 in the 0700 data folder), one secret per
  session's conversation, the `mcpServers` entries, and each call dispatched to `actions.py`.
- `actions.py`: what each tool does, always within the caller's own conversation.
"""
