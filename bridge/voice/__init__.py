"""Voice notes both ways (docs/voice.md): a note the owner records is transcribed on this
machine for the agents (listen.py), and an answer may come back read aloud (spoken.py)."""
