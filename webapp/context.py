"""What every handler of one app instance shares: settings, a database connection per thread, who is asking.

Built by `build_app`; never a module global (two apps in one process, as in tests, must not share state).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import gradio as gr
import sqlite_utils

from data import db as dbmod, users
from data.jobs import fleet_of
from data.settings import Settings
from serving.fleet.reader import FleetReader
from serving.runner import fleet_targets
from webapp import failures

LOCAL_ADMIN = "local"


def shows_errors(fn):
    """Wrap a handler so that whatever it lets through reaches the user as a message (gr.Error, a toast) instead
    of a generic "Error": a data.errors.DataError (a limit, a refusal, a conflict nobody caught) as its text, a
    failure of the server's own (the database's write lock held by another program, a full disk) as its
    sentence, anything else as a fixed sentence with a log reference (webapp.failures.handler). The signature
    is kept, so Gradio still passes gr.Request / gr.EventData. Every event is wrapped so in the end
    (failures.guard_events); wiring it here says so where the event is made."""
    return failures.handler(fn)


@dataclass(frozen=True)
class User:
    name: str
    role: str

    def can(self, needed: str) -> bool:
        return users.at_least(self.role, needed)


class AppContext:
    def __init__(self, settings: Settings, *, fleet_urls: list[str] | None = None, simulated: bool = False):
        self.settings = settings
        dbmod.secure_dir(settings.data_dir)  # S9: the data dir is owner-only
        # decided once where the app is built (build_app), so the banner is in the first paint
        self.simulated_fleet = simulated
        self.fleet_urls = list(fleet_urls or [])
        # every read of the fleet's health the app makes (Fleet tab, Jobs tab), with the data dir's fleet key
        self.fleet_reader = FleetReader(settings)
        # the fleet the jobs started here are for: the one the app watches, which launch.sh gives the supervised
        # runner too (without --fleet-urls, what the launcher of this data dir started); data.jobs.fleet_of
        self.job_fleet = fleet_of(fleet_targets(settings, self.fleet_urls))
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[sqlite_utils.Database] = []

    def db(self) -> sqlite_utils.Database:
        """This thread's connection (sqlite-utils connections are thread-bound)."""
        conn = getattr(self._local, "db", None)
        if conn is None:
            conn = dbmod.connect(self.settings.db)
            self._local.db = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                try:
                    conn.close()
                except Exception:  # closing from another thread may refuse; nothing to save
                    pass
            self._all.clear()

    def user_by_name(self, name: str | None) -> User | None:
        if not self.settings.auth_required:
            return User(LOCAL_ADMIN, "admin")
        if not name:
            return None
        row = users.get(self.db(), name)
        if row is None or row["disabled"]:
            return None
        return User(row["name"], row["role"])

    def user(self, request: gr.Request | None) -> User:
        """The user behind a Gradio event, looked up in SQLite on every call (a role change applies at once).
        Raises gr.Error when nobody is logged in."""
        name = getattr(request, "username", None) if request is not None else None
        user = self.user_by_name(name)
        if user is None:
            raise gr.Error("You are not logged in.", title="Not logged in")
        return user

    def require(self, request: gr.Request | None, role: str) -> User:
        """The user, if they have at least `role`; otherwise a refusal (enforced server-side, per event)."""
        user = self.user(request)
        if not user.can(role):
            raise gr.Error(f"This needs the {role} role; you are {user.role}.", title="Not allowed")
        return user
