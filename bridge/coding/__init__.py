"""What coding agents show in Matrix: plans, tool calls, diffs, terminals, modes, questions.

`render` is pure (text in, message text and sanitised HTML out); the modules that send and
edit messages build on it.
"""
