"""The trajectory store: SQLAlchemy Core on SQLite (embedded) or PostgreSQL, Alembic migrations.

from evolvable.store import Store, TrajectoryFilter
store = Store.open()                      # settings' database, migrated to head
store.apply_events(events)                # idempotent by event id, one transaction
store.apply_runs(runs)                    # finished runs as documents; returns those to apply as events
page, cursor = store.list_trajectories(TrajectoryFilter(agent="support"), limit=50)
"""

from evolvable.store.documents import RunDocuments
from evolvable.store.filters import InvalidCursor, TrajectoryFilter
from evolvable.store.store import Store, events_of
from evolvable.store.tables import metadata

__all__ = ["InvalidCursor", "RunDocuments", "Store", "TrajectoryFilter", "events_of", "metadata"]
