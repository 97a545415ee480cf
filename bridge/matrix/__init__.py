"""Matrix I/O: the appservice API the homeserver calls, the one dispatcher every incoming event
passes, the client that masquerades as each identity, the intents every outgoing event leaves by,
puppets, presence, media, rooms the bridge makes and MSC4391 command descriptions."""
