"""What each incoming room event does: a message, a reaction, a redaction, a member, a room
upgraded. The dispatcher (bridge/matrix/dispatch.py) calls these."""
