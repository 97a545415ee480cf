"""Asking the owner something in a channel and waiting for the answer: an agent's permission
requests and questions."""
