"""Pure settings and words shared by the commands and the turns: command parsing, who approves,
budget rules. No Matrix, no store."""
