"""The local stack: `sidekicks up` (embedded Synapse, owner, local model) and `sidekicks check`."""
