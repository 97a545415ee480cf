"""Bridge commands: `!help`, `!agents`, ... in the bot's DM and `!stop`, `!threads`, ... in a
channel; budgets and their commands."""
