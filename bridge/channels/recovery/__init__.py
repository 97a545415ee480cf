"""At start, the turns an earlier run left unfinished: what to do with each (pure) and doing it."""
