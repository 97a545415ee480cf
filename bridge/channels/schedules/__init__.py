"""Scheduled work: when it runs, how it reads, and each run as a turn."""
