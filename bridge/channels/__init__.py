"""Channels and turns: portals (one room = one channel), what each incoming room event does,
routing, mentions, context, streamed answers, permissions, bot commands and recovery. Routing,
mentions, context, replies, rendering and command parsing are pure functions."""
