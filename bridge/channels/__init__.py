"""Channels and turns, by stage (docs/architecture.md "Layout and import rules"): `events`
(what each incoming room event does) above `commands` (bot commands), `asks` (asking the owner),
`schedules` (scheduled work) and `recovery` (turns left unfinished), all above `turns` (one
turn, from the routed message to the answer), above `rules` (pure settings and words) and
`base` (the open channels, notices, streamed messages)."""
