"""``field__in_constants``: an IN list written into the SQL instead of passed as parameters.

SQLite uses a partial index only when the query repeats the index's WHERE term word
for word, and a bound parameter never matches the literal in the index's definition.
Queries that must reach such an index (failed attempts, for the overview) spell the
same constants out. Only short lowercase identifiers are accepted, so nothing a user
typed can ever reach this SQL.
"""

from __future__ import annotations

import re
from typing import Any

from django.db.models import Lookup

_CONSTANT = re.compile(r"[a-z_]{1,32}")


class InConstants(Lookup):
    lookup_name = "in_constants"
    # The values are SQL text here, not parameters to prepare.
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = list(self.rhs)
        if not values or not all(isinstance(v, str) and _CONSTANT.fullmatch(v) for v in values):
            raise ValueError(f"in_constants takes short lowercase identifiers, not {values!r}")
        # The order and spelling of Django's own rendering of the index condition.
        listed = ", ".join(f"'{value}'" for value in values)
        return f"{lhs} IN ({listed})", tuple(lhs_params)
