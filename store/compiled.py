"""Hot queries whose SQL peewee writes once; each call only binds values.

Writing SQL is most of what a peewee call costs: about 5x the database's own
work for the unseen-context query. A query's SQL never changes, so the hot
paths (appending a message, reading the last ones) build it at open, with
marker strings where the values go, and remember which value goes where.
"""

import peewee as pw


class Compiled:
    def __init__(self, db: pw.Database, build, *names: str) -> None:
        # The markers are text: peewee passes text through every field type
        # used here unchanged (a boolean field would not: hence the check).
        markers = {f"\x00{name}\x00": name for name in names}
        query = build(**{name: marker for marker, name in markers.items()})
        self.sql, params = db.get_sql_context().sql(query).query()
        self._db = db
        # For each placeholder, in order: (True, name) or (False, constant).
        self._params = [(True, markers[p]) if isinstance(p, str) and p in markers else (False, p) for p in params]
        used = {name for is_name, name in self._params if is_name}
        if used != set(names):
            raise TypeError(f"values {set(names) - used} were not bound as-is in {self.sql}")

    def params(self, **values) -> list:
        """The values for `sql`'s placeholders, in order."""
        return [values[p] if is_name else p for is_name, p in self._params]

    def run(self, **values):
        return self._db.execute_sql(self.sql, self.params(**values))

    def rows(self, **values) -> list[tuple]:
        return self.run(**values).fetchall()
