"""Changes to a person that span the identity and the work tables: disabling someone ends their sessions
(data.users), gives their assigned clips back to the review queue (data.assignments) and ends their review lease
(data.review_queue), in one transaction.
A module of its own because data.assignments already reads data.users (roles, who exists), so data.users
cannot call back into it."""

from __future__ import annotations

import sqlite_utils

from data import assignments, review_queue, users
from data.db import immediate


def set_disabled(db: sqlite_utils.Database, name: str, disabled: bool, *, actor: str = "cli") -> dict:
    """Disable or enable `name`. Disabling ends their sessions, gives their assigned clips back to the review
    queue (`released_clips` says how many) and ends their review lease (`released_lease`: the clip they were on
    is served to the others at once, not when the lease runs out): clips held by someone who cannot sign in would
    otherwise drop out of every queue."""
    with immediate(db):
        user = users.set_disabled_flag(db, name, disabled, actor=actor)
        released = assignments.release(db, name, actor=actor, why="user disabled") if disabled else 0
        lease = review_queue.release(db, name) if disabled else 0
    return {**user, "released_clips": released, "released_lease": lease}
