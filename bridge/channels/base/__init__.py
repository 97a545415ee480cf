"""What every stage works with: the open channels, the parts a portal is handed, conversations,
room names, notices, streamed messages and background tasks."""
