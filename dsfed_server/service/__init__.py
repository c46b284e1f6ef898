"""The site service: one object holding a site's config, rules, data, registry,
sessions and audit log, with the operations both front doors call.

The HTTP API (:mod:`dsfed_server.api`, and the Opal routes beside it) calls these
methods; a site in the analyst's own process (:mod:`dsfed_server.inprocess`) is reached
through that same app, so a simulation run in one process exercises the code a deployed
site runs. Every operation is audited.

:class:`SiteService` is a facade over parts, each a module of this package:

- :mod:`~dsfed_server.service.state`: the site's state, read once from its configuration, and the audit
  record of every operation;
- :mod:`~dsfed_server.service.calls`: the call pipeline (parse, check, bind, run, release per site; assign);
- :mod:`~dsfed_server.service.workspaces`: sessions and their symbols;
- :mod:`~dsfed_server.service.rounds`: secure sums, and pooled and relayed releases sealed and opened;
- :mod:`~dsfed_server.service.budget`: a call's privacy cost before it runs, and the budget spent;
- :mod:`~dsfed_server.service.admin`: logins, the functions, profiles and tables offered, uploaded
  models, and the audit log for governance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from dsfed_core.calltree import Call
from dsfed_server.config import SiteConfig, User, load_site_config
from dsfed_server.disclosure.rules import DEFAULT_PROFILE
from dsfed_server.registry import REGISTRY, Registry
from dsfed_server.service.admin import Administration
from dsfed_server.service.budget import PrivacyBudget
from dsfed_server.service.calls import LIST_FUNCTIONS_HINT, CallPipeline, CallRequest
from dsfed_server.service.rounds import SecureRounds
from dsfed_server.service.state import SiteState, check_enabled
from dsfed_server.service.workspaces import Workspaces
from dsfed_server.workspace import Session

__all__ = ["LIST_FUNCTIONS_HINT", "CallRequest", "SiteService", "check_enabled"]


class SiteService(SiteState):
    """A site's state with the operations of its parts: what the HTTP app and the Opal routes call."""

    def __init__(
        self,
        config: SiteConfig,
        *,
        base_dir: Path,
        registry: Registry = REGISTRY,
    ) -> None:
        super().__init__(config, base_dir=base_dir, registry=registry)
        self.calls = CallPipeline(self)
        self.workspaces = Workspaces(self)
        self.rounds = SecureRounds(self, self.calls)
        self.privacy = PrivacyBudget(self, self.calls)
        self.admin = Administration(self, self.calls)

    @classmethod
    def from_config_file(cls, path: str | Path) -> "SiteService":
        """The service of the site configured in ``path``."""
        config, base = load_site_config(path)
        return cls(config, base_dir=base)

    # --- authentication (admin.py) ------------------------------------------------------

    def login_password(self, name: str, password: str, address: str = "in-process", *,
                       wait_s: float | None = None) -> User:
        """The user whose password this is (:meth:`Administration.login_password`)."""
        return self.admin.login_password(name, password, address, wait_s=wait_s)

    def login_token(self, token: str, address: str = "in-process") -> User:
        """The user whose API token this is (:meth:`Administration.login_token`)."""
        return self.admin.login_token(token, address)

    # --- sessions (workspaces.py) -------------------------------------------------------

    def open_session(self, user: User, profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
        """Open a session under ``profile`` (:meth:`Workspaces.open_session`)."""
        return self.workspaces.open_session(user, profile)

    def close_session(self, user: User, sid: str) -> None:
        """Close a session (:meth:`Workspaces.close_session`)."""
        self.workspaces.close_session(user, sid)

    def session_exists(self, user: User, sid: str) -> dict[str, Any]:
        """A session's profile and symbol count (:meth:`Workspaces.session_exists`)."""
        return self.workspaces.session_exists(user, sid)

    def symbols(self, user: User, sid: str) -> list[dict[str, str]]:
        """A session's symbols (:meth:`Workspaces.symbols`)."""
        return self.workspaces.symbols(user, sid)

    def remove_symbol(self, user: User, sid: str, name: str) -> None:
        """Remove a symbol (:meth:`Workspaces.remove_symbol`)."""
        self.workspaces.remove_symbol(user, sid, name)

    # --- calls (calls.py; secure ones in rounds.py) -------------------------------------

    def run_nested(self, session: Session, call: Call) -> Any:
        """A call inside another call's arguments (:meth:`CallPipeline.run_nested`)."""
        return self.calls.run_nested(session, call)

    def aggregate(self, user: User, sid: str, request: CallRequest, *,
                  shape: Literal["native", "opal", "r"] = "native") -> Any:
        """Run an aggregate function (:meth:`CallPipeline.aggregate`), with the secure option through
        the secure rounds (:meth:`SecureRounds.aggregate`)."""
        return self.calls.aggregate(user, sid, request, secure=self.rounds.aggregate, shape=shape)

    def release_pooled(self, user: User, sid: str, option: dict[str, Any]) -> dict[str, Any]:
        """Second half of a pooled release (:meth:`SecureRounds.release_pooled`)."""
        return self.rounds.release_pooled(user, sid, option)

    def assign(self, user: User, sid: str, symbol: str, request: CallRequest) -> dict[str, str]:
        """Keep a call's value as ``symbol`` (:meth:`CallPipeline.assign`)."""
        return self.calls.assign(user, sid, symbol, request)

    def assign_table(self, user: User, sid: str, symbol: str, table: str, variables: list[str] | None
                     ) -> dict[str, str]:
        """Opal's table assignment (:meth:`CallPipeline.assign_table`)."""
        return self.calls.assign_table(user, sid, symbol, table, variables)

    # --- what the site offers (admin.py) ------------------------------------------------

    def functions(self, user: User, profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
        """The functions ``profile`` enables (:meth:`Administration.functions`)."""
        return self.admin.functions(user, profile)

    def profiles(self, user: User) -> list[dict[str, Any]]:
        """The site's profiles (:meth:`Administration.profiles`)."""
        return self.admin.profiles(user)

    def tables(self, user: User) -> list[dict[str, Any]]:
        """The site's tables (:meth:`Administration.tables`)."""
        return self.admin.tables(user)

    def upload_model(self, user: User, data: bytes) -> dict[str, Any]:
        """Store an uploaded model file (:meth:`Administration.upload_model`)."""
        return self.admin.upload_model(user, data)

    # --- the privacy budget (budget.py) -------------------------------------------------

    def cost(self, user: User, sid: str, request: CallRequest) -> dict[str, Any]:
        """What a call would charge, without running it (:meth:`PrivacyBudget.cost`)."""
        return self.privacy.cost(user, sid, request)

    def budget(self, user: User) -> dict[str, Any]:
        """Governance: the budget spent and remaining (:meth:`PrivacyBudget.budget`)."""
        return self.privacy.budget(user)

    def my_budget(self, user: User) -> dict[str, Any]:
        """The caller's own budget (:meth:`PrivacyBudget.my_budget`)."""
        return self.privacy.my_budget(user)

    # --- the audit log, for governance (admin.py) ---------------------------------------

    def audit_records(self, user: User) -> list[dict[str, Any]]:
        """Governance: the audit log's records (:meth:`Administration.audit_records`)."""
        return self.admin.audit_records(user)

    def audit_verify(self, user: User) -> dict[str, Any]:
        """Governance: the audit chain verified (:meth:`Administration.audit_verify`)."""
        return self.admin.audit_verify(user)
