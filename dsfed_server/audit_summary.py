"""``dsfed audit show``: a site's audit log summarised for its governance board.

Calls are counted by analyst, function or outcome, refusals are listed with the rule that
refused them, and the privacy budget is stated in **the ledger's own accounting**: every noisy
call's audit record carries the charges the ledger recorded for it (per table: epsilon, delta
and the Renyi slope rho) and the budgets in force (``privacy.budget``). The charges are summed per
site x table (all analysts) and per site x analyst x table and stated by
:func:`~dsfed_server.disclosure.accountant.statement`, the function behind ``GET /v1/budget``,
``GET /v1/budget/mine`` (``session.budget()``) and so the report: the tighter of basic
composition and Renyi DP at the budget's delta, and what remains of the budget. Over a whole log,
the figures equal the site's ``GET /v1/budget`` (``tests/test_budget_figures.py``). A site's
budget is the one its latest record states (the ledger, too, holds the spending to the budget in
force now).

Filters select the calls (an analyst, an outcome, a time window). The budget lines then state
what the selected calls spent; what *remains* is stated only when the selection holds every
charge on the budget up to its end (no ``since`` or outcome filter; for a table's budget, no
analyst filter either), since otherwise it would not be the budget's state.
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, Literal

from dsfed_server.disclosure.accountant import ACCOUNTANT, ZERO, Caps, Cost, statement
from dsfed_server.governance import WIDTH, wrap

GroupBy = Literal["analyst", "function", "outcome"]
Format = Literal["text", "json", "csv"]

CSV_COLUMNS = ("site", "scope", "analyst", "table", "accountant", "spent_epsilon", "spent_delta",
               "remaining_epsilon", "remaining_delta", "budget_epsilon", "budget_delta", "basic_epsilon",
               "basic_delta", "rho", "queries", "releases")


def parse_time(text: str, *, end: bool = False) -> datetime:
    """An ISO date or date-time as an aware UTC datetime (a naive one is taken as UTC). A bare date
    stands for its whole day: its start, or with ``end`` the start of the next day (an exclusive
    upper bound, so ``--until 2026-03-31`` keeps the 31st)."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime.combine(day + timedelta(days=1 if end else 0), time(), timezone.utc)
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date (2026-03-31) or a date and time (2026-03-31T14:00:00Z)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class Selection:
    """Which audit records to summarise: analysts, outcomes (empty: all), and ``since <= time < until``."""

    analysts: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None

    def keeps(self, record: dict[str, Any]) -> bool:
        if self.analysts and _group(record, "analyst") not in self.analysts:
            return False
        if self.outcomes and _group(record, "outcome") not in self.outcomes:
            return False
        if self.since is None and self.until is None:
            return True
        moment = _record_time(record)
        return (moment is not None and (self.since is None or moment >= self.since)
                and (self.until is None or moment < self.until))

    def as_dict(self) -> dict[str, Any]:
        return {"analysts": list(self.analysts), "outcomes": list(self.outcomes),
                "since": self.since.isoformat() if self.since else None,
                "until": self.until.isoformat() if self.until else None}

    @property
    def whole_budget(self) -> dict[str, bool]:
        """For each budget scope: whether the selection holds every charge on it up to its end."""
        complete = self.since is None and not self.outcomes
        return {"analyst": complete, "table": complete and not self.analysts}


def _record_time(record: dict[str, Any]) -> datetime | None:
    try:
        return parse_time(str(record["time"]))
    except (KeyError, ValueError):
        return None


def read_audit(path: str | Path) -> list[dict[str, Any]]:
    """The records of an audit log; a line that is not a JSON object raises ``ValueError`` (file:line)."""
    records = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{number}: not a JSON audit record") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: not a JSON audit record")
            records.append(record)
    return records


def _group(record: dict[str, Any], by: GroupBy) -> str:
    key = {"analyst": "user", "function": "function", "outcome": "outcome"}[by]
    value = record.get(key)
    return "(unknown)" if value in (None, "") else str(value)


def count_calls(records: list[dict[str, Any]], by: GroupBy) -> dict[str, Counter[str]]:
    """For each analyst, function or outcome: how many calls ended in each outcome."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        counts[_group(record, by)][_group(record, "outcome")] += 1
    return dict(sorted(counts.items()))


# --- the budget, in the ledger's accounting -------------------------------------------------


@dataclass
class _Spent:
    cost: Cost = ZERO
    queries: int = 0
    releases: int = 0
    last: str | None = None

    def add(self, charge: dict[str, Any], when: str | None) -> None:
        self.cost = self.cost + Cost(float(charge["epsilon"]), float(charge["delta"]), float(charge["rho"]))
        self.queries += 1  # one ledger row per charge
        self.releases += int(charge.get("releases", 0))
        self.last = max(filter(None, (self.last, when)), default=None)


@dataclass
class _Ledger:
    """The charges the records carry, summed as the site's ledger sums its rows."""

    caps: dict[str, Caps] = field(default_factory=dict)  # site -> the budget its latest record states
    tables: dict[tuple[str, str], _Spent] = field(default_factory=lambda: defaultdict(_Spent))
    analysts: dict[tuple[str, str, str], _Spent] = field(default_factory=lambda: defaultdict(_Spent))

    def add(self, record: dict[str, Any]) -> None:
        privacy = record.get("privacy")
        if not isinstance(privacy, dict):
            return
        site, when = str(record.get("site", "(unknown)")), record.get("time")
        if isinstance(privacy.get("budget"), dict):  # records in log order: the latest one wins
            self.caps[site] = Caps.from_dict(privacy["budget"])
        for charge in privacy.get("charges") or []:
            self.tables[(site, charge["table"])].add(charge, when)
            self.analysts[(site, _group(record, "analyst"), charge["table"])].add(charge, when)

    def cap(self, site: str) -> Caps:
        if site not in self.caps:
            raise ValueError(f"the audit records of site {site} carry privacy charges but not the budget they were "
                             "charged against (privacy.budget; a log written before dsfed recorded it): their spending "
                             "cannot be stated in the ledger's accounting; read the site's GET /v1/budget instead")
        return self.caps[site]


def _stated(total: _Spent, cap: Any, whole: bool) -> dict[str, Any]:
    entry = {**statement(total.cost, cap), "budget": {"epsilon": cap.epsilon, "delta": cap.delta},
             "queries": total.queries, "releases": total.releases, "last": total.last}
    if not whole:
        entry["remaining"] = None
    return entry


def budget_statement(records: list[dict[str, Any]], selection: Selection = Selection()) -> dict[str, Any]:
    """Spent and remaining per site x table (all analysts, against ``budget.epsilon_per_table``) and per
    site x analyst x table (against ``epsilon_per_analyst``), by :func:`~dsfed_server.disclosure.
    accountant.statement` from the charges ``records`` (already selected) carry."""
    ledger = _Ledger()
    for record in records:
        ledger.add(record)
    whole = selection.whole_budget
    tables = [{"site": site, "table": table, **_stated(total, ledger.cap(site).table, whole["table"])}
              for (site, table), total in sorted(ledger.tables.items())]
    spending = [{"site": site, "analyst": analyst, "table": table,
                 **_stated(total, ledger.cap(site).analyst, whole["analyst"])}
                for (site, analyst, table), total in sorted(ledger.analysts.items())]
    return {"accountant": ACCOUNTANT, "budget": {site: caps.as_dict() for site, caps in sorted(ledger.caps.items())},
            "tables": tables, "spending": spending}


# --- the summary and its three formats ----------------------------------------------------------


def audit_summary(paths: list[Path], by: GroupBy = "function", selection: Selection = Selection()) -> dict[str, Any]:
    """What ``dsfed audit show`` reports on the selected records of one or more logs, as data."""
    records = [r for path in paths for r in read_audit(path) if selection.keeps(r)]
    times = sorted(str(r["time"]) for r in records if r.get("time"))
    refused = [r for r in records if r.get("outcome") == "refused"]
    return {
        "logs": [str(p) for p in paths], "selection": selection.as_dict(),
        "sites": sorted({str(r.get("site")) for r in records if r.get("site")}),
        "calls": len(records), "first": times[0] if times else None, "last": times[-1] if times else None,
        "by": by, "counts": {group: dict(c) for group, c in count_calls(records, by).items()},
        "refusals": [{"time": r.get("time"), "site": r.get("site"), "analyst": _group(r, "analyst"),
                      "function": r.get("function"), "rule": r.get("rule"), "message": r.get("message", "")}
                     for r in refused],
        "privacy": budget_statement(records, selection),
    }


def summarize_audit(paths: list[Path], by: GroupBy = "function", selection: Selection = Selection(),
                    fmt: Format = "text") -> str:
    """``dsfed audit show``: :func:`audit_summary` as plain text, JSON, or CSV (the budget lines)."""
    summary = audit_summary(paths, by, selection)
    if fmt == "json":
        return json.dumps(summary, indent=2) + "\n"
    if fmt == "csv":
        return _csv(summary["privacy"])
    return _text(summary)


def _budget_rows(privacy: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The budget lines as flat rows: the tables' budgets, then the analysts' shares."""
    for scope, entries in (("table", privacy["tables"]), ("analyst", privacy["spending"])):
        for e in entries:
            remaining = e["remaining"] or {}
            yield {"site": e["site"], "scope": scope, "analyst": e.get("analyst", ""), "table": e["table"],
                   "accountant": e["spent"]["accountant"], "spent_epsilon": e["spent"]["epsilon"],
                   "spent_delta": e["spent"]["delta"], "remaining_epsilon": remaining.get("epsilon"),
                   "remaining_delta": remaining.get("delta"), "budget_epsilon": e["budget"]["epsilon"],
                   "budget_delta": e["budget"]["delta"], "basic_epsilon": e["basic"]["epsilon"],
                   "basic_delta": e["basic"]["delta"], "rho": e["rho"], "queries": e["queries"],
                   "releases": e["releases"]}


def _csv(privacy: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in _budget_rows(privacy):
        writer.writerow({k: repr(v) if isinstance(v, float) else ("" if v is None else v) for k, v in row.items()})
    return out.getvalue()


def _table(header: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """A plain-text table: the first ``left`` columns left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  " + "  ".join(cell.ljust(w) if i < left else cell.rjust(w)
                                for i, (cell, w) in enumerate(zip(row, widths)))

    return [line(header), *(line(row) for row in rows)]


def _outcome_order(outcomes: set[str]) -> list[str]:
    first = [o for o in ("ok", "refused") if o in outcomes]
    return first + sorted(outcomes - set(first))


def _selection_text(selection: dict[str, Any]) -> str | None:
    parts = [f"{name} {', '.join(selection[key])}" for name, key in (("analyst", "analysts"), ("outcome", "outcomes"))
             if selection[key]]
    parts += [f"{name} {selection[name]}" for name in ("since", "until") if selection[name]]
    return "Selected: " + "; ".join(parts) if parts else None


def _text(summary: dict[str, Any]) -> str:
    logs = summary["logs"]
    lines = [*textwrap.wrap(f"Audit log{'s' if len(logs) > 1 else ''}: {', '.join(logs)}", WIDTH,
                            subsequent_indent="  ", break_on_hyphens=False, break_long_words=False),
             *filter(None, [_selection_text(summary["selection"])]),
             f"Sites: {', '.join(summary['sites']) or '(none recorded)'}",
             f"{summary['calls']} calls recorded"
             + (f", from {summary['first']} to {summary['last']}" if summary["first"] else "")]

    by, counts = summary["by"], summary["counts"]
    outcomes = _outcome_order({o for c in counts.values() for o in c})
    lines += ["", f"Calls by {by}:"]
    if not counts:
        lines.append("  (no calls)")
    elif by == "outcome":
        lines += _table(["outcome", "calls"], [[o, str(counts[o][o])] for o in outcomes])
    else:
        rows = [[group, str(sum(c.values())), *(str(c.get(o, 0)) for o in outcomes)] for group, c in counts.items()]
        lines += _table([by, "calls", *outcomes], rows)

    refused = summary["refusals"]
    lines += ["", f"Refused calls: {len(refused)}"]
    for r in refused:
        lines += textwrap.wrap(
            f"{r['time'] or '?'} site {r['site'] or '?'}, analyst {r['analyst']}, {r['function'] or '?'}: refused "
            f"by rule {r['rule'] or '(none recorded)'} -- {r['message']}", WIDTH, initial_indent="  - ",
            subsequent_indent="    ")
    by_rule = Counter(str(r["rule"] or "(none recorded)") for r in refused)
    if by_rule:
        lines.append("  By rule: " + "; ".join(f"{rule}: {n}" for rule, n in sorted(by_rule.items())))
    return "\n".join(lines + ["", *_budget_text(summary["privacy"])]) + "\n"


def _budget_text(privacy: dict[str, Any]) -> list[str]:
    lines = ["Privacy budget:",
             *wrap("in the site ledger's accounting, as GET /v1/budget states it: the charges summed per table and "
                    "stated by the tighter of basic composition and Renyi DP at the budget's delta; remaining = "
                    "budget - spent.", 2)]
    rows = list(_budget_rows(privacy))
    if not rows:
        return [*lines, "  no privacy budget spent"]

    def number(value: float | None, digits: str) -> str:
        return "-" if value is None else format(value, digits)

    table = [[r["site"], r["table"], r["analyst"] or "(all analysts)", number(r["spent_epsilon"], ".6g"),
              number(r["spent_delta"], ".3g"), r["accountant"], number(r["remaining_epsilon"], ".6g"),
              number(r["budget_epsilon"], "g"), str(r["queries"])] for r in rows]
    lines += _table(["site", "table", "analyst", "spent epsilon", "delta", "accountant", "remaining epsilon",
                     "budget epsilon", "queries"], table, left=3)
    if any(r["remaining_epsilon"] is None for r in rows):
        lines += wrap("remaining is '-' where the selection does not hold every charge on that budget (a --since "
                       "or --outcome filter; for a table's budget, an --analyst filter)", 2)
    return lines
