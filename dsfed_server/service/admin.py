"""Administration: logins (throttled and audited), what the site offers (its functions, profiles and
tables), the models analysts upload, and governance's reading and verifying of the audit log."""

from __future__ import annotations

from typing import Any, Callable

from dsfed_core.errors import SiteError, TooManyFailedLogins
from dsfed_server import rbridge
from dsfed_server.config import User
from dsfed_server.disclosure.rules import DEFAULT_PROFILE
from dsfed_server.models import read_upload
from dsfed_server.onnx_model import ONNXModel
from dsfed_server.service.calls import CallPipeline
from dsfed_server.service.state import SiteState


class Administration:
    """The service's operations besides calls, rounds and the budget."""

    def __init__(self, state: SiteState, calls: CallPipeline) -> None:
        self.state = state
        self.calls = calls

    def login_password(self, name: str, password: str, address: str = "in-process", *,
                       wait_s: float | None = None) -> User:
        """The user whose password this is; its check waits for a slot up to ``wait_s`` (None: the site's
        ``[login] check_wait_s``)."""
        return self._login(name, address, lambda: self.state.auth.by_password(name, password, wait_s=wait_s))

    def login_token(self, token: str, address: str = "in-process") -> User:
        """The user whose API token this is."""
        return self._login("(API token)", address, lambda: self.state.auth.by_token(token))

    def _login(self, name: str, address: str, check: Callable[[], User]) -> User:
        """A login, throttled per client address and user name; a failure is audited (the name
        shortened to 64 characters), and of a throttled streak only the first refusal (a login
        refused because every password-check slot was busy checked nothing and is not recorded)."""
        state = self.state
        shown = name if len(name) <= 64 else f"{name[:64]}...({len(name)} characters)"
        try:
            state.auth.check_throttle(address, name)
            return check()
        except TooManyFailedLogins as exc:
            if state.auth.throttle.first_refusal(address, name):
                state.audit.record(user=shown, session=None, function="login", kind="auth", call="", address=address,
                                   outcome=exc.kind, rule=exc.rule, message=f"{exc.message}; {exc.hint}")
            raise exc.at(site=state.name)
        except SiteError as exc:
            state.auth.throttle.failed(address, name)
            state.audit.record(user=shown, session=None, function="login", kind="auth", call="", address=address,
                               outcome="unauthenticated", rule=None, message=exc.message)
            raise exc.at(site=state.name)

    def functions(self, user: User, profile: str = DEFAULT_PROFILE) -> dict[str, Any]:
        """The functions ``profile`` enables, documented."""
        state = self.state
        call = "" if profile == DEFAULT_PROFILE else f"profile={profile}"
        with state.audited(user, None, "listFunctions", "metadata", call):
            state.check_profile(profile)
            entries = []
            for name in state.profile_rules[profile].functions.enabled:
                spec = state.registry.get(name)
                info = spec.describe()  # type: ignore[union-attr]
                info["available"] = spec.backend != "R" or rbridge.installed()  # type: ignore[union-attr]
                entries.append(info)
        rules = state.profile_rules[profile]
        # the thresholds in force, as governance reads them in the rules file (nothing secret)
        public = {section: getattr(rules, section).model_dump()
                  for section in ("disclosure", "bins", "privacy", "budget", "secure_aggregation")}
        return {"site": state.name, "profile": profile, "noise_off": state.rules.noise_off, "rules": public,
                "functions": entries}

    def profiles(self, user: User) -> list[dict[str, Any]]:
        """The site's profiles (Opal's DataSHIELD profiles): name and enabled functions."""
        with self.state.audited(user, None, "listProfiles", "metadata", ""):
            return [{"name": name, "functions": list(rules.functions.enabled)}
                    for name, rules in self.state.profile_rules.items()]

    def tables(self, user: User) -> list[dict[str, Any]]:
        """The site's tables as analysts see them listed: their variables, identifier columns left out."""
        with self.state.audited(user, None, "listTables", "metadata", ""):
            return [t.describe() for t in self.state.catalog.tables()]

    def upload_model(self, user: User, data: bytes) -> dict[str, Any]:
        """Store a model file an analyst sends, if the rules approve it (:func:`~dsfed_server.models.
        read_upload`), under its SHA-256; the audit record names the digest, refused ones too."""
        state = self.state
        with state.audited(user, None, "uploadModel", "model", f"{len(data)} bytes") as record:
            state.require_role(user, "analyst")
            model = read_upload(data, self.calls.guard("uploadModel"))
            record["call"] = f"sha256 {model.sha256} ({len(data)} bytes)"
            sha256 = state.models.put(model)
            names = [entry.name for entry in state.rules.models.approved if entry.sha256 == sha256]
            if isinstance(model, ONNXModel):
                return {"site": state.name, "sha256": sha256, "approved_as": names, "format": "onnx",
                        "inputs": [spec.name for spec in model.inputs], "outputs": [n for n, _ in model.outputs]}
            return {"site": state.name, "sha256": sha256, "approved_as": names, "format": "glm",
                    "formula": model.formula, "family": model.family, "link": model.link, "inputs": model.inputs}

    def audit_records(self, user: User) -> list[dict[str, Any]]:
        """Governance: the audit log's records."""
        with self.state.audited(user, None, "readAudit", "governance", ""):
            self.state.require_role(user, "governance")
            return self.state.audit.read()

    def audit_verify(self, user: User) -> dict[str, Any]:
        """Governance: the audit chain verified here with the site's key, and its head (keep a copy
        outside the site: a later verify with it detects a rewrite)."""
        with self.state.audited(user, None, "verifyAudit", "governance", ""):
            self.state.require_role(user, "governance")
            report = self.state.audit.verify()
            return {"ok": report.ok, "records": report.records, "message": str(report), "head": self.state.audit.head}
