"""A site's state: its configuration, rules and profiles, tables, keys, audit log, privacy ledger, cut
history, approved models, sessions and logins, read once from the site's configuration; and the audit
record every operation of the service's parts writes (:meth:`SiteState.audited`)."""

from __future__ import annotations

import logging
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from dsfed_core.calltree import Limits
from dsfed_core.errors import DisclosureRefusal, Forbidden, InternalError, NotFound, SiteError
from dsfed_server import functions  # noqa: F401  (registers the function set)
from dsfed_server import rbridge
from dsfed_server.access_log import STDERR, open_access_log
from dsfed_server.audit import AuditLog, audit_key
from dsfed_server.auth import Authenticator
from dsfed_server.catalog import Catalog
from dsfed_server.config import SiteConfig, User, read_secret, resolve
from dsfed_server.disclosure import secure_sum
from dsfed_server.disclosure.history import History
from dsfed_server.disclosure.ledger import Ledger
from dsfed_server.disclosure.rules import DEFAULT_PROFILE, Rules, load_rules
from dsfed_server.engines import open_engine
from dsfed_server.models import ModelStore
from dsfed_server.registry import REGISTRY, Registry
from dsfed_server.tomlfile import ConfigFileError, locate
from dsfed_server.workspace import Session, SessionStore

log = logging.getLogger("dsfed.site")


def check_enabled(rules: Rules, rules_path: Path, registry: Registry) -> None:
    """Every function the rules file enables, at the top level and in each profile, must exist in the registry."""
    lists = [(("functions", "enabled"), rules.functions.enabled)]
    lists += [(("profiles", name, "enabled"), p.enabled) for name, p in getattr(rules, "profiles", {}).items()]
    for loc, enabled in lists:
        unknown = [name for name in enabled if registry.get(name) is None]
        if unknown:
            text = rules_path.read_text(encoding="utf-8")
            raise ConfigFileError(
                f"{rules_path}:{locate(text, loc)}: {'.'.join(loc)} lists unknown function(s) "
                f"{', '.join(unknown)}; known: {', '.join(registry.names())}"
            )


class SiteState:
    """What the service's parts share: the site's configuration and what it opens, each read once."""

    def __init__(
        self,
        config: SiteConfig,
        *,
        base_dir: Path,
        registry: Registry = REGISTRY,
    ) -> None:
        self.config = config
        self.name = config.site.name
        self.rules_path = resolve(base_dir, config.site.rules)
        self.rules = load_rules(self.rules_path)
        check_enabled(self.rules, self.rules_path, registry)
        # each profile's effective rules; "default" is the file's top level
        self.profile_rules: dict[str, Rules] = {name: self.rules.profile(name) for name in self.rules.profile_names}
        self.registry = registry
        self.catalog = Catalog(resolve(base_dir, config.site.data_dir), open_engine(config.catalog, base_dir))
        self.catalog.validate_all()
        self.identifiers = self.catalog.identifiers()  # columns no call may name (disclosure/identifiers.py)
        self.secret = read_secret(resolve(base_dir, config.site.secret_file))
        audit_log = resolve(base_dir, config.site.audit_log)
        self.audit = AuditLog(audit_log, self.name, audit_key(self.secret))
        # written by the HTTP front door only (api.py), one line per request
        access = config.site.access_log or str(audit_log.with_name(f"{self.name}-access.log"))
        self.access_log = open_access_log(None if access == STDERR else resolve(base_dir, access))
        self.identity = secure_sum.identity_key(self.secret)  # signs this site's secure-aggregation keys
        self.peers = {name: secure_sum.parse_identity(key) for name, key in config.federation.peers.items()}
        self.ledger = Ledger(resolve(base_dir, config.site.ledger))  # privacy budget spent, per analyst x table
        # cuts released per table column and subsets made per table, all analysts, persisted (history.py); the
        # digests of the tables' first records carry a table's row sets over to it once it grew
        self.history = History(resolve(base_dir, config.site.ledger), self.catalog.prefix_digests)
        self.catalog.on_read = self.history.columns_read  # a column read later in a run, checked as it is read
        ledger = resolve(base_dir, config.site.ledger)
        self.models = ModelStore(resolve(base_dir, config.site.models_dir) if config.site.models_dir
                                 else ledger.with_name(ledger.stem + "-models"))
        self.sessions = SessionStore(config.site.session_idle_timeout_s, config.site.max_sessions_per_user,
                                     config.site.session_reclaim_after_s)
        self.auth = Authenticator(config.users, config.login)
        self.limits = Limits(
            max_length=self.rules.strings.max_length,
            max_name_length=self.rules.strings.max_name_length,
            max_depth=self.rules.parser.max_depth,
        )
        if self.rules.noise_off:
            log.warning(
                "site %s: DIFFERENTIAL-PRIVACY NOISE IS OFF (rules file %s): %s",
                self.name, self.rules_path, self.rules.privacy.no_noise_acknowledged,
            )
        needs_r = [n for n in self.rules.functions.enabled
                   if registry.get(n).backend == "R"]  # type: ignore[union-attr]
        if needs_r and not rbridge.installed():
            log.warning("site %s: R is not available; %s will be refused: %s",
                        self.name, ", ".join(needs_r), rbridge.unavailable_reason())

    def close(self) -> None:
        """Release what the site holds open: its engine's connection (DuckDB's database and the threads it
        keeps), the columns read, the privacy ledger's and release history's connections, and the access log's
        file. A site process never needs it (its end releases them); a site made in a program's own process
        (:mod:`dsfed_server.inprocess`, tests, simulations) is closed when done, or holds them until it is
        garbage -- and a FastAPI app made over it (``create_app``) keeps it alive in FastAPI's caches of route
        functions for about 80 apps made after it. The service answers no calls after."""
        self.catalog.close()
        self.ledger.close()
        self.history.close()
        for handler in list(self.access_log.handlers):
            self.access_log.removeHandler(handler)
            handler.close()

    @contextmanager
    def audited(self, user: User, session: str | None, function: str, kind: str, call: str) -> Iterator[dict]:
        """Record the operation's outcome; the body may fill in fields (e.g. a new session id)."""
        base = {"user": user.name, "session": session, "function": function, "kind": kind, "call": call}
        try:
            yield base
        except SiteError as exc:
            exc.at(site=self.name, function=function if function not in ("?", "") else None)
            outcome = "refused" if isinstance(exc, DisclosureRefusal) else exc.kind  # NotEnabled is one
            if isinstance(exc, InternalError):  # e.g. a broken contract: the administrator's to see
                log.error("site %s: %s", self.name, exc)
            self.audit.record(**base, outcome=outcome, rule=exc.rule, message=exc.message)
            raise
        except Exception as exc:  # an implementation bug: HTTP 500 with an id, never a 4xx
            raise self.internal_error(exc, base) from None
        else:
            self.audit.record(**base, outcome="ok", rule=None, message="")

    def internal_error(self, exc: Exception, fields: dict[str, Any]) -> InternalError:
        """An unexpected exception (a bug, never the analyst's doing) as the error the analyst sees:
        a fresh error id, logged with the traceback and recorded in the audit log, so the site's
        administrator finds one from the other. Call from an ``except`` block."""
        error_id = secrets.token_hex(8)
        function = str(fields.get("function") or "?")
        log.exception("site %s: internal error %s in %s", self.name, error_id, function)
        record = self.audit.record(**{"user": None, "session": None, "kind": "internal", "call": "", **fields,
                                      "function": function, "outcome": "internal_error", "rule": None,
                                      "error_id": error_id, "message": repr(exc)[:300]})
        return InternalError(f"internal error {error_id} while running {function}", site=self.name,
                             function=function if function != "?" else "",
                             hint=f"a fault of the site, not of the call: its administrator finds error id {error_id} "
                                  f"in the server log and audit record {record['seq']}")

    def require_role(self, user: User, role: str) -> None:
        """Refuse a user without ``role`` (analyst, governance)."""
        if user.role != role:
            raise Forbidden(f"this needs the {role} role; user {user.name!r} has {user.role!r}").at(site=self.name)

    def check_profile(self, profile: str) -> None:
        """Refuse a profile the site does not have."""
        if profile not in self.profile_rules:
            raise NotFound(f"no profile {profile!r} at this site",
                           hint=f"profiles: {', '.join(self.profile_rules)}")

    def session_rules(self, session: Session | None) -> Rules:
        """The rules of the session's profile (the site's own rules without a session)."""
        return self.profile_rules[session.profile if session is not None else DEFAULT_PROFILE]
