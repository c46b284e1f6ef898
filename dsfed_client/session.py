"""One analyst session over several sites.

Calls go to all sites in parallel, so K sites take about as long as the
slowest. If any site fails, the call raises :class:`FederatedCallError` naming
every failing site, function and rule, and no pooled result is returned.
"""

from __future__ import annotations

import copy
import re
import secrets
import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Protocol

from dsfed_client import aggregation, pooling
from dsfed_client.aggregation import Aggregation
from dsfed_client.calls import Call, Ref, to_tree
from dsfed_client.errors import BudgetWarning, FederatedCallError, RecordsLeftOut
from dsfed_core.errors import CallError, NotEnabled, SiteError
from dsfed_core.wire import MAX_RELAYED_CELLS
from dsfed_client.secure import SecureSum, new_round_id, unmask_sum
from dsfed_client.transport import HttpTransport, Transport, encode


class InProcessSite(Protocol):
    """A site in the analyst's process (``dsfed_server.inprocess.InProcessSite``): its name, and a
    transport to it for given credentials."""

    name: str

    def connect(self, *, user: str, password: str | None = None, token: str | None = None) -> Transport: ...


def call_body(value: Call | Ref) -> dict[str, Any]:
    """A request's call and the handles it reads (checked by the sites, see :class:`Ref`)."""
    handles = value.handles() if isinstance(value, Call) else {value.symbol: value.digest} if value.digest else {}
    return {"call": to_tree(value), **({"handles": handles} if handles else {})}


def called_functions(body: dict[str, Any]) -> set[str]:
    """The functions a request's call names, nested calls included (call tree, or the call text)."""
    if isinstance(body.get("expr"), str):
        return set(re.findall(r"([A-Za-z][\w.]*)\s*\(", body["expr"]))
    names: set[str] = set()
    stack = [body.get("call")]
    while stack:
        node = stack.pop()
        if isinstance(node, dict) and isinstance(node.get("call"), str):
            names.add(node["call"])
            stack += [*node.get("args", []), *node.get("kwargs", {}).values()]
    return names


def budget_warnings(function: str, site: str, preview: dict[str, Any]) -> list[str]:
    """The warnings a site's cost preview calls for: one per table and budget of which the call would
    use more than the site's ``budget.warn_share`` of what remains (the site flags them)."""
    whose = {"analyst": "your share of the privacy budget", "table": "the privacy budget (all analysts together)"}
    out = []
    for entry in preview.get("tables", []):
        for scope, use in entry.get("uses", {}).items():
            if use.get("warn"):
                share = (f"{use['share']:.0%} of it" if use["within"] else
                         "more than remains: the site will refuse the call")
                out.append(f"site {site!r}, function {function}: this call would use epsilon {use['epsilon']:.4g} of "
                           f"the {use['remaining']:.4g} that remains of {whose[scope]} on table {entry['table']!r} "
                           f"({share}; the site warns above {preview['warn_share']:.0%}, budget.warn_share). "
                           "To stop before such a call: warnings.simplefilter('error', dsfed_client.BudgetWarning)")
    return out


def addressed_to(site: str, sealed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What a pooled step relays to ``site``: every site's declaration (``meta``) and the vector it
    sealed for ``site``, not those it sealed for the other sites (K - 1 vectors per site, not
    K (K - 1): at 50 sites a histogram's relay was 150 MB a site)."""
    return {sender: {"meta": answer["meta"],
                     "sealed": {name: box for name, box in answer["sealed"].items() if name == site}}
            for sender, answer in sealed.items()}


def _fewer_bits(function: str, frac_bits: int, clipped: int) -> int:
    """The fraction bits to ask again with when ``clipped`` values did not fit the 64-bit range."""
    if frac_bits == 0:
        raise ValueError(f"secure sum of {function}: {clipped} value(s) exceed the 64-bit range even without "
                         "fraction bits; nothing was returned")
    return max(0, frac_bits - 12)


class SiteResults(Mapping[str, Any]):
    """Per-site results of one call, in the order the sites were added."""

    def __init__(self, function: str, results: dict[str, Any]) -> None:
        self.function = function
        self._results = results

    def __getitem__(self, site: str) -> Any:
        return self._results[site]

    def __iter__(self) -> Iterator[str]:
        return iter(self._results)

    def __len__(self) -> int:
        return len(self._results)

    def __repr__(self) -> str:
        body = ", ".join(f"{k!r}: {v!r}" for k, v in self._results.items())
        return f"SiteResults({self.function}, {{{body}}})"


@dataclass
class LoginBuilder:
    """Collects the sites to log in to (as ``DSLoginBuilder`` does in DataSHIELD), each with the
    table it holds the analysis' data in (``table``: DataSHIELD's per-server table), which
    :meth:`FederatedSession.assign_table` assigns when it is given no table."""

    transports: list[Transport] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)  # site -> its project.table

    def append(self, site: str, url: str, *, user: str | None = None, password: str | None = None,
               token: str | None = None, table: str | None = None, read_timeout: float = 300.0,
               connect_timeout: float = 30.0) -> "LoginBuilder":
        """A site reached over HTTP, with user and password or an API token, and optionally its
        ``project.table`` (the timeouts: :class:`~dsfed_client.transport.HttpTransport`)."""
        self._check_new(site)
        self.transports.append(
            HttpTransport(site, url, user=user, password=password, token=token, read_timeout=read_timeout,
                          connect_timeout=connect_timeout)
        )
        self._table(site, table)
        return self

    def append_inprocess(self, site: InProcessSite, *, user: str, password: str | None = None,
                         token: str | None = None, table: str | None = None) -> "LoginBuilder":
        """A site in this process (simulation studies, fast tests): requests go through the site's
        own HTTP app without a socket (the site's ``connect`` makes the transport)."""
        self._check_new(site.name)
        self.transports.append(site.connect(user=user, password=password, token=token))
        self._table(site.name, table)
        return self

    def _table(self, site: str, table: str | None) -> None:
        if table is not None:
            self.tables[site] = table

    def _check_new(self, site: str) -> None:
        if any(t.site == site for t in self.transports):
            raise ValueError(f"site {site!r} added twice")

    def login(self, *, warn_budget: bool = True) -> "FederatedSession":
        """Open a session at every site; ``warn_budget``: preview each noisy call's cost and warn
        first (:class:`~dsfed_client.errors.BudgetWarning`) when a site flags it."""
        if not self.transports:
            raise ValueError("no sites added")
        return FederatedSession(list(self.transports), warn_budget=warn_budget, tables=self.tables)


class FederatedSession:
    """An open session at every site; use as a context manager to close them all."""

    def __init__(self, transports: list[Transport], *, warn_budget: bool = True,
                 tables: dict[str, str] | None = None) -> None:
        self.transports = {t.site: t for t in transports}
        self.site_tables = dict(tables or {})  # site -> project.table (LoginBuilder's per-site tables)
        # preview every noisy call's cost and warn (BudgetWarning) when a site flags it
        self.warn_budget = warn_budget
        self._noisy: frozenset[str] | None = None  # the sites' noisy functions, listed at the first need
        self._pool = ThreadPoolExecutor(max_workers=len(transports), thread_name_prefix="dsfed-site")
        self.session_ids: dict[str, str] = {}
        self._secure_round: tuple[str, list[dict[str, Any]]] | None = None  # round id, roster
        self._secure_step = 0
        # the sites' cut histories per table column (what they answered with): relayed with every
        # pooled release, so that all sites check the pooled cells against all of them
        self._cut_histories: dict[tuple[str, str], set[tuple[float, bool]]] = {}
        # the pooled cells the sites recorded, (identity, pooled count, column): relayed with every pooled release,
        # so that the sites decide on the pooled records whether a new cell differs from them by too few records
        self._pooled_cells: set[tuple[str, int, str]] = set()
        self._view = False
        opened = self._all("openSession", lambda t: t.request("POST", "/sessions", function="openSession"),
                           raise_errors=False)
        failures = {s: r for s, r in opened.items() if isinstance(r, SiteError)}
        self.session_ids = {s: r["session"] for s, r in opened.items() if not isinstance(r, SiteError)}
        if failures:
            self.close()
            raise FederatedCallError("openSession", failures, len(transports))

    # --- plumbing -------------------------------------------------------------------

    @property
    def sites(self) -> list[str]:
        return list(self.transports)

    def _all(self, function: str, action: Callable[[Transport], Any], *, raise_errors: bool = True) -> dict[str, Any]:
        futures = {site: self._pool.submit(action, t) for site, t in self.transports.items()}
        results: dict[str, Any] = {}
        for site, future in futures.items():
            try:
                results[site] = future.result()
            except SiteError as exc:
                results[site] = exc
        failures = {s: r for s, r in results.items() if isinstance(r, SiteError)}
        if failures and raise_errors:
            raise FederatedCallError(function, failures, len(self.transports))
        return results

    def _in_session(self, function: str, method: str, suffix: str, body: dict[str, Any] | None = None, *,
                    raise_errors: bool = True, per_site: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """``body`` to every site, or each site its own (``per_site``: a relay, each site the vectors
        sealed for it)."""
        if body is not None and suffix in ("/aggregate", "/assign"):
            self._warn_before(function, body)
        encoded = None if body is None else encode(body)  # once for all sites

        def action(t: Transport) -> Any:
            own, own_encoded = (body, encoded) if per_site is None else (per_site[t.site], None)
            return t.request(method, f"/sessions/{self.session_ids[t.site]}{suffix}", own, function=function,
                             encoded=own_encoded)

        return self._all(function, action, raise_errors=raise_errors)

    def site_view(self, site: str) -> "FederatedSession":
        """This session at ``site`` alone, for analyses of that site's own records (per-site estimates):
        the same site session and symbols, so handles stay valid. Every call through the view is a
        per-site release that ``site`` checks by its own rules; a protocol of several steps (a GLM fit)
        runs relayed in a round of the view's own. Closing the view closes nothing."""
        if site not in self.transports:
            raise ValueError(f"no site {site!r} in this session (sites: {', '.join(self.sites)})")
        view = copy.copy(self)  # shares the pool, the cut histories and the budget-warning settings
        view.transports, view.session_ids = {site: self.transports[site]}, {site: self.session_ids[site]}
        view._secure_round, view._secure_step, view._view = None, 0, True
        return view

    # --- calls ----------------------------------------------------------------------

    def aggregate(self, function: str, *args: Any, **kwargs: Any) -> SiteResults:
        """Run an aggregate function at every site: ``aggregate("meanDS", Ref("D$age"))``."""
        results = self._in_session(function, "POST", "/aggregate", call_body(Call(function, *args, **kwargs)))
        return SiteResults(function, {s: r["result"] for s, r in results.items()})

    def cost(self, function: str, *args: Any, **kwargs: Any) -> SiteResults:
        """What an aggregate or assign call would charge your privacy budget at every site, per table
        it reads, and what you have left there, before running it: ``cost("scoreHistogramDS",
        Ref("D$y"), Ref("D$score"))``. Nothing is run, released or spent; a release charged before
        costs nothing again, so the charge is at most this."""
        return SiteResults(function, self._in_session(function, "POST", "/cost",
                                                      call_body(Call(function, *args, **kwargs))))

    def noisy_functions(self) -> frozenset[str]:
        """The functions that release noise at some site of the session (their checks name
        ``privacy.mechanism``), from the sites' function listings."""
        if self._noisy is not None:
            return self._noisy
        listing = self._all("listFunctions", lambda t: t.request("GET", "/functions", function="listFunctions"),
                            raise_errors=False)
        noisy = frozenset(f["name"] for info in listing.values() if not isinstance(info, SiteError)
                          for f in info["functions"] if "privacy.mechanism" in f["checks"])
        if not any(isinstance(info, SiteError) for info in listing.values()):
            self._noisy = noisy  # kept once every site has answered
        return noisy

    def _warn_before(self, function: str, body: dict[str, Any]) -> None:
        """Before a noisy call: its cost preview at every site (``/cost``), and a :class:`BudgetWarning`
        for each budget of which it would use more than the site's ``budget.warn_share`` of what
        remains. A site that refuses the preview is left to refuse the call itself."""
        if not self.warn_budget or not called_functions(body) & self.noisy_functions():
            return
        preview = {key: body[key] for key in ("call", "expr", "handles") if key in body}
        answers = self._in_session(function, "POST", "/cost", preview, raise_errors=False)
        for site, answer in answers.items():
            if not isinstance(answer, SiteError):
                for message in budget_warnings(function, site, answer):
                    warnings.warn(message, BudgetWarning, stacklevel=4)

    def _round(self) -> tuple[str, list[dict[str, Any]]]:
        """This session's secure-aggregation round: its id and every site's signed key (the roster);
        the first secure call of the session draws the round and relays the sites' keys."""
        if self._secure_round is None:
            round_id = new_round_id()
            keys = self.aggregate("secureKeyDS", round_id)
            self._secure_round = (round_id, [keys[site] for site in self.sites])
        return self._secure_round

    def _relayed_cuts(self) -> list[dict[str, Any]]:
        return [{"table": table, "column": column, "cuts": [list(c) for c in sorted(cuts)]}
                for (table, column), cuts in self._cut_histories.items()]

    def _learn_histories(self, answers: dict[str, Any]) -> bool:
        """Add the cut histories and the pooled cells the sites answered with; True when a history held a cut
        not known before."""
        grew = False
        for answer in answers.values():
            cells = answer.get("cells") if isinstance(answer, dict) else None
            self._pooled_cells.update((str(i), int(n), str(c)) for i, n, c in cells or [])
            history = answer.get("history") if isinstance(answer, dict) else None
            if history:
                known = self._cut_histories.setdefault((history["table"], history["column"]), set())
                new = {(float(v), bool(i)) for v, i in history["cuts"]} - known
                grew = grew or bool(new)
                known.update(new)
        return grew

    def pooled_capability(self) -> tuple[bool, str]:
        """Whether every site of the session offers pooled releases (secure aggregation, and each
        site's signed promise to check pooled cells), and if not, why."""
        try:
            _, roster = self._round()
        except FederatedCallError as exc:
            return False, f"secure aggregation is not available: {exc}"
        per_site = [entry["site"] for entry in roster if not entry.get("pooled")]
        if per_site:
            return False, (f"{', '.join(per_site)} check(s) binned releases per site only "
                           "(secure_aggregation.pooled_thresholds = false)")
        return True, ""

    def _step(self) -> int:
        self._secure_step += 1
        return self._secure_step

    def secure_sum(self, function: str, *args: Any, frac_bits: int = 24, **kwargs: Any) -> SecureSum:
        """Run an aggregate at every site and receive only the sum over sites of its additive fields
        (secure aggregation; the function must offer it, see ``functions()``).

        The first secure call of the session relays the sites' signed keys (``secureKeyDS``);
        each call takes a new step of that round. Values travel in fixed point with
        ``frac_bits`` fraction bits (resolution :math:`2^{-f}`). Where sites had to clip values
        to the 64-bit range (the sum says how many, not where), the call is asked again with 12
        fewer bits, down to 0; if values still do not fit, it raises. If a site fails, the call
        raises and nothing is decoded.
        """
        round_id, roster = self._round()
        call = call_body(Call(function, *args, **kwargs))
        while True:
            body = {**call, "secure": {"round": round_id, "step": self._step(), "roster": roster,
                                       "frac_bits": frac_bits}}
            results = self._in_session(function, "POST", "/aggregate", body)
            summed = unmask_sum(function, {s: r["result"] for s, r in results.items()})
            if not summed.clipped:
                return summed
            frac_bits = _fewer_bits(function, frac_bits, summed.clipped)

    def pooled(self, function: str, *args: Any, frac_bits: int = 40, **kwargs: Any) -> dict[str, Any]:
        """A pooled release: the sites sum the call's counts and sums among themselves, check the
        pooled cells against their rules, and release the pooled result (the sites' release gate,
        ``dsfed_server/disclosure/gate.py``). The analyst relays the sites' sealed vectors, which
        it cannot read: two round trips (more for a protocol of several steps, whose last release
        is returned), and the result is the same at every site (checked here).

        Every site of the session must check pooled cells (``secure_aggregation.pooled_thresholds``);
        a site that refuses names its rule. Values travel in fixed point with ``frac_bits`` fraction
        bits; if some did not fit, the call is asked again with 12 fewer.
        """
        return aggregation.last_release(self.pooled_steps(function, *args, frac_bits=frac_bits, **kwargs))

    def pooled_steps(self, function: str, *args: Any, frac_bits: int = 40, relayed: bool = False, **kwargs: Any
                     ) -> Iterator[dict[str, Any]]:
        """Every release of a pooled protocol of several steps, as it comes (a GLM fit: the pooled
        parts at each iterate; stop iterating to stop the protocol). The sites derive each step's
        parameters from the previous step's pooled result; the analyst relays sealed vectors and
        chooses nothing but when to stop. ``relayed``: each site checks its own counts instead of
        the pooled ones (a relayed protocol: any number of sites, a site checking per site only)."""
        round_id, roster = self._round()
        call = call_body(Call(function, *args, **kwargs))
        yielded = False
        while True:
            step = self._step()
            option: dict[str, Any] = {"round": round_id, "step": step, "roster": roster, "frac_bits": frac_bits}
            option.update({"relayed": True} if relayed else {"pooled": True, "cuts": self._relayed_cuts()})
            if self._pooled_cells and not relayed:  # none to relay before a site answered with some
                option["cells"] = [list(c) for c in sorted(self._pooled_cells)][:MAX_RELAYED_CELLS]
            answers = {s: r["result"] for s, r in
                       self._in_session(function, "POST", "/aggregate", {**call, "secure": option}).items()}
            if any("pooled" not in a for a in answers.values()):  # a site released cuts the relay did not hold
                if not self._learn_histories(answers):
                    raise ValueError(f"pooled release of {function}: a site asked for cut histories it already "
                                     "has; nothing is returned")
                continue
            sealed = {site: a["pooled"] for site, a in answers.items()}
            while True:
                body = {"round": round_id, "step": step, "roster": roster, "next_step": self._step()}
                bodies = {site: {**body, "relay": addressed_to(site, sealed)} for site in sealed}
                answers = {s: r["result"] for s, r in
                           self._in_session(function, "POST", "/pooled", per_site=bodies).items()}
                self._learn_histories(answers)
                first = next(iter(answers.values()))
                if "clipped" in first:
                    if yielded:
                        raise ValueError(f"pooled release of {function}: {first['clipped']} value(s) exceed the "
                                         "64-bit range in a later step; nothing more is returned")
                    frac_bits = _fewer_bits(function, frac_bits, int(first["clipped"]))
                    break
                release = first["release"]
                differ = [site for site, a in answers.items() if a["release"] != release]
                if differ:
                    raise ValueError(f"pooled release of {function}: {', '.join(differ)} released another pooled "
                                     f"result than {next(iter(answers))}; nothing is returned")
                if release is not None:
                    yielded = True
                    yield release
                if "continue" not in first:
                    return
                sealed = {site: a["continue"] for site, a in answers.items()}
                step = body["next_step"]

    def aggregation(self, secure: bool | None) -> Aggregation:
        """How this session releases an analysis' sums: pooled over the sites (``secure=True``), per
        site (``False``), or pooled where every site offers it (``None``). The one place that
        decides; see :mod:`dsfed_client.aggregation`."""
        return aggregation.choose(self, secure)

    def aggregate_expr(self, expr: str) -> SiteResults:
        """Run DataSHIELD call text at every site: ``aggregate_expr("meanDS(D$age)")``."""
        function = expr.split("(", 1)[0].strip()
        results = self._in_session(function, "POST", "/aggregate", {"expr": expr})
        return SiteResults(function, {s: r["result"] for s, r in results.items()})

    def assign(self, symbol: str, value: Call | Ref) -> Ref:
        """Store a call's result (or a copy of a symbol/column) as ``symbol`` at every site; its
        handle: the name and the digest of its definition (calls that read the handle are refused
        once the symbol is removed or replaced, see :class:`~dsfed_client.calls.Ref`)."""
        function = value.function if isinstance(value, Call) else "$"
        answers = self._in_session(function, "POST", "/assign", {"symbol": symbol, **call_body(value)})
        return self._handle(symbol, answers)

    @staticmethod
    def _handle(symbol: str, answers: dict[str, Any]) -> Ref:
        digests = {answer["digest"] for answer in answers.values()}
        if len(digests) != 1:
            raise ValueError(f"the sites hold different definitions of {symbol!r} (made by different calls); "
                             "assign it again at every site")
        return Ref(symbol, digests.pop())

    def assign_expr(self, symbol: str, expr: str, *, function: str | None = None) -> Ref:
        """Store the result of DataSHIELD call text as ``symbol``: ``assign_expr("age", "D$age")``; its
        handle. ``function`` names the call in errors (default: the text's function, ``$`` for a column)."""
        function = function or (expr.split("(", 1)[0].strip() if "(" in expr else "$")
        answers = self._in_session(function, "POST", "/assign", {"symbol": symbol, "expr": expr})
        return self._handle(symbol, answers)

    def derive(self, symbol: str, expression: str) -> Ref:
        """A new column computed at every site from columns and numbers, kept there as ``symbol``:
        ``derive("lnodes", "log(D$pnodes + 1)")`` (the sites' ``deriveDS``: ``+ - * / ^``, ``log``,
        ``exp``, ``sqrt``, ``abs``, ``pmin``, ``pmax``, ``ifelse`` on comparisons; each comparison a cut
        the sites check, docs/analyst.md "Derived variables"); its handle."""
        return self.assign_expr(symbol, expression, function="deriveDS")

    def assign_table(self, symbol: str, table: str | None = None, variables: list[str] | None = None) -> Ref:
        """Load ``project.table`` (optionally some variables) as ``symbol`` at every site; its handle.
        Without ``table``, each site loads its own, as the login named it (``LoginBuilder.append(...,
        table=...)``): every site is sent the whole map (``assignTable(tables = "site=project.table",
        ...)``), so the sites share the symbol's definition, and pooled releases and protocols read it as
        they read a table of one name (the sites name it by the map's label, bound to the tables and the
        sites: dsfed_server/disclosure/shared_tables.py)."""
        if table is not None:
            body = {"symbol": symbol, "table": table, "variables": variables}
            return self._handle(symbol, _noted(self._in_session("assignTable", "POST", "/assign-table", body)))
        unnamed = [site for site in self.sites if site not in self.site_tables]
        if unnamed:
            raise ValueError(f"assign_table({symbol!r}) without a table: the login names no table for "
                             f"{', '.join(unnamed)}; give one (assign_table({symbol!r}, 'project.table')) or name "
                             "each site's with LoginBuilder.append(..., table='project.table')")
        tables = {site: self.site_tables[site] for site in self.sites}
        if len(set(tables.values())) == 1:
            return self.assign_table(symbol, next(iter(tables.values())), variables)
        pairs = [f"{site}={table}" for site, table in sorted(tables.items())]
        call = Call("assignTable", tables=pairs, **({"variables": list(variables)} if variables else {}))
        answers = _noted(self._in_session("assignTable", "POST", "/assign", {"symbol": symbol, **call_body(call)}))
        return self._handle(symbol, answers)

    def symbols(self) -> SiteResults:
        return SiteResults("listSymbols", self._in_session("listSymbols", "GET", "/symbols"))

    def remove(self, symbol: str) -> SiteResults:
        return SiteResults("removeSymbol", self._in_session("removeSymbol", "DELETE", f"/symbols/{symbol}"))

    @staticmethod
    def new_symbol(kind: str) -> str:
        """A fresh server-side name for an analysis' intermediate (``dsfed.<kind>.<6 hex>``, within
        the default 20-character limit), so that no analysis overwrites another's symbol."""
        return f"dsfed.{kind}.{secrets.token_hex(3)}"

    @contextmanager
    def temporary(self, kind: str) -> Iterator[str]:
        """A fresh symbol name for the ``with`` block, removed at every site afterwards (where it was
        assigned; a site that fails to remove it keeps it until the session closes)."""
        name = self.new_symbol(kind)
        try:
            yield name
        finally:
            self._all("removeSymbol", lambda t: t.request(
                "DELETE", f"/sessions/{self.session_ids[t.site]}/symbols/{name}", function="removeSymbol"),
                raise_errors=False)

    def at_every_site(self, function: str, method: str, path: str, body: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
        """One request to every site outside the session (``/v1{path}``), e.g. a model upload."""
        encoded = None if body is None else encode(body)
        return self._all(function, lambda t: t.request(method, path, body, function=function, encoded=encoded))

    def functions(self) -> SiteResults:
        return SiteResults("listFunctions", self.at_every_site("listFunctions", "GET", "/functions"))

    def require_enabled(self, *functions: str, before: str, within: dict[str, dict[str, float]] | None = None
                        ) -> None:
        """Raise :class:`FederatedCallError` naming every site whose rules file does not enable one
        of ``functions`` (rule ``functions.enabled``), or whose registry bounds a parameter of a
        function it offers below or above the value ``within`` gives it (``{"rocGlmDataDS":
        {"thresholds": 5000}}``), before an analysis (``before``) spends rounds and budget on releases
        it could not finish; reads only the sites' function listings."""
        listing = self.functions()
        failures: dict[str, SiteError] = {}
        for site in self.sites:
            offered = {e["name"]: e for e in listing[site]["functions"]}
            missing = [f for f in functions if f not in offered]
            if missing:
                failures[site] = NotEnabled(
                    f"{', '.join(missing)} not enabled at this site, and {before} needs it", site=site,
                    function=missing[0], rule="functions.enabled",
                    hint=f"ask the site's governance board to add {', '.join(missing)} to [functions] enabled "
                         "in its rules file, or leave the site out of the session")
                continue
            for function, values in (within or {}).items():
                if function not in offered:  # not in ``functions``: the analysis does without it here
                    continue
                params = {p["name"]: p for p in offered[function]["params"]}
                for name, value in values.items():
                    low, high = params[name].get("minimum"), params[name].get("maximum")
                    if (low is not None and value < low) or (high is not None and value > high):
                        span = f"{'-inf' if low is None else f'{low:g}'} to {'inf' if high is None else f'{high:g}'}"
                        failures[site] = CallError(
                            f"{before} would ask {function} for {name} = {value:g}; this site takes {span}",
                            site=site, function=function, hint=f"ask for {name} from {span}")
        if failures:
            raise FederatedCallError(before, failures, len(self.sites))

    def budget(self) -> SiteResults:
        """Your privacy budget at every site: per table, what you have spent and what remains of
        your share, in the site ledger's own accounting (``spent``/``remaining``: epsilon, delta)."""
        return SiteResults("listMyBudget", self._all("listMyBudget", lambda t: t.request("GET", "/budget/mine")))

    def tables(self) -> SiteResults:
        return SiteResults("listTables", self.at_every_site("listTables", "GET", "/tables"))

    # --- pooled summaries -------------------------------------------------------------

    def mean(self, x: str) -> pooling.PooledMean:
        """Pooled mean of a numeric vector from per-site means and counts."""
        return pooling.pooled_mean(self.aggregate("meanDS", Ref(x)))

    def var(self, x: str) -> pooling.PooledVariance:
        """Pooled variance from per-site sums, sums of squares and counts."""
        return pooling.pooled_variance(self.aggregate("varDS", Ref(x)))

    def length(self, x: str) -> pooling.PooledCount:
        return pooling.pooled_count(self.aggregate("lengthDS", Ref(x)))

    def table1d(self, x: str) -> pooling.PooledTable:
        return pooling.pooled_table1d(self.aggregate("table1DDS", Ref(x)))

    def table2d(self, x: str, y: str) -> pooling.PooledTable:
        return pooling.pooled_table2d(self.aggregate("table2DDS", Ref(x), Ref(y)))

    def histogram(self, x: str, breaks: list[float]) -> pooling.PooledHistogram:
        return pooling.pooled_histogram(self.aggregate("histogramDS", Ref(x), list(breaks)))

    def transfer_stats(self) -> dict[str, dict[str, int]]:
        """Requests and body bytes so far, per site (round trips of an analysis = requests)."""
        return {site: dict(vars(t.stats)) for site, t in self.transports.items()}

    # --- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the session at every site that still answers; never raises."""
        if self._view:  # a view of one site (site_view): the session it views stays open
            return
        def action(t: Transport) -> Any:
            sid = self.session_ids.get(t.site)
            if sid:
                return t.request("DELETE", f"/sessions/{sid}", function="closeSession")
            return None

        if self.session_ids:
            self._all("closeSession", action, raise_errors=False)
            self.session_ids = {}
        for t in self.transports.values():
            t.close()
        self._pool.shutdown(wait=False)

    def __enter__(self) -> "FederatedSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _noted(answers: dict[str, Any]) -> dict[str, Any]:
    """``answers`` to a table's assignment, each site's note (records it left out, and why) warned of."""
    for site, answer in answers.items():
        if answer.get("note"):
            warnings.warn(f"{site}: {answer['note']}", RecordsLeftOut, stacklevel=3)
    return answers
