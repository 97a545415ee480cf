"""The states of a turn record (store/turns.py has the diagram), below every part that reads
them: the hot queries (queries.py) and the pruning of turns over (txns.py) as well as turns.py."""

TAKEN, CLAIMED, POSTED, PROMPTED, FINISHING = "taken", "claimed", "posted", "prompted", "finishing"
PROMPTING = "prompting"  # written before the prompt goes to the agent; `prompted` once it went
DONE, ENDED, INTERRUPTED, DROPPED = "done", "ended", "interrupted", "dropped"
TERMINAL = (DONE, ENDED, INTERRUPTED, DROPPED)
LIVE = (TAKEN, CLAIMED, POSTED, PROMPTING, PROMPTED, FINISHING)
NOT_BEGUN = (TAKEN, CLAIMED, POSTED)  # the agent has not been prompted: it can start (again)
