"""An analyst's workspaces: sessions opened under a profile, looked up and closed, and the symbols
a session holds, listed and removed."""

from __future__ import annotations

from typing import Any

from dsfed_server.config import User
from dsfed_server.context import r_class
from dsfed_server.disclosure.rules import DEFAULT_PROFILE
from dsfed_server.service.state import SiteState


class Workspaces:
    """The session operations of the service, each audited."""

    def __init__(self, state: SiteState) -> None:
        self.state = state

    def open_session(self, user: User, profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
        """Open a session whose calls follow ``profile``'s enabled functions and rules."""
        call = "" if profile == DEFAULT_PROFILE else f"profile={profile}"
        with self.state.audited(user, None, "openSession", "session", call) as record:
            self.state.require_role(user, "analyst")
            self.state.check_profile(profile)
            session, reclaimed = self.state.sessions.open(user.name, profile)
            record["session"] = session.id
            if reclaimed is not None:
                record["call"] += f" (reclaimed idle session {reclaimed})"
        return {"session": session.id, "site": self.state.name, "profile": profile}

    def close_session(self, user: User, sid: str) -> None:
        """Close the caller's session ``sid``."""
        with self.state.audited(user, sid, "closeSession", "session", ""):
            self.state.sessions.close(sid, user.name)

    def session_exists(self, user: User, sid: str) -> dict[str, Any]:
        """The caller's session ``sid``: its profile and how many symbols it holds."""
        with self.state.audited(user, sid, "getSession", "session", ""):
            session = self.state.sessions.get(sid, user.name)
        return {"session": session.id, "site": self.state.name, "profile": session.profile,
                "symbols": len(session.symbols)}

    def symbols(self, user: User, sid: str) -> list[dict[str, str]]:
        """The session's symbols and their R classes."""
        with self.state.audited(user, sid, "listSymbols", "session", ""):
            session = self.state.sessions.get(sid, user.name)
            with session.lock:
                return [{"name": k, "class": r_class(v)} for k, v in sorted(session.symbols.items())]

    def remove_symbol(self, user: User, sid: str, name: str) -> None:
        """Remove a symbol, with what the session knew of it (its tables and definition)."""
        with self.state.audited(user, sid, "removeSymbol", "session", name):
            session = self.state.sessions.get(sid, user.name)
            with session.lock:
                session.get(name)
                del session.symbols[name]
                session.sources.pop(name, None)
                session.definitions.pop(name, None)
