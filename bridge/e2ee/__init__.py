"""End-to-end encryption for the bridge's identities.

Every puppet and the bridge bot has a device of its own (bridge/e2ee/device.py), kept in the
config's data folder and reused on every start. Encryption plugs into the two seams that exist
for it and nowhere else: `Outgoing.prepare` (bridge/matrix/intent.py) encrypts a room event in an
encrypted room, and the dispatcher's `Encryption` hooks (bridge/matrix/dispatch.py) receive crypto
traffic and decrypt `m.room.encrypted` events.
"""
