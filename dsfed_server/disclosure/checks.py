"""Disclosure checks: the one place where the rules file's thresholds are applied.

A :class:`Guard` is bound to one call (site, function, rules). Implementations
call its methods before they release anything; each method either returns or
raises :class:`DisclosureRefusal` naming the rule (the dotted key of the rules
file) and what the analyst can do. A refusal never states the count that fell
short (that number would itself be the disclosure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dsfed_server.disclosure.mechanisms import AnalyticGaussian, content_digest, seeded_rng
from dsfed_server.disclosure.rules import Rules
from dsfed_server.errors import CallError, DisclosureRefusal


@dataclass(frozen=True)
class Guard:
    rules: Rules
    site: str
    function: str
    secret: bytes = field(repr=False, default=b"")
    # the running call's reads and pending releases (dsfed_server.disclosure.ledger.CallScope);
    # None outside an analyst call (then nothing is charged)
    scope: Any = field(repr=False, default=None)
    # per analyst x table: row sets of the subsets made so far (differencing.SubsetHistory)
    subsets: Any = field(repr=False, default=None)
    # per analyst x labelled score ordering: cuts of the reference CDFs evaluated so far (cuts.CutHistory)
    cuts: Any = field(repr=False, default=None)
    # this site's share of the DP noise variance (1/h in a secure sum; secure_aggregation.honest_sites)
    noise_share: float = 1.0
    # a pooled release (relay.py): minimum counts are checked on the pooled counts, not on this site's
    # own; min_count and saturation record (kind, n) here and the pooled release checks the sums
    deferred: list[tuple[str, int]] | None = field(repr=False, default=None)

    def _refuse(self, message: str, rule: str, hint: str) -> DisclosureRefusal:
        return DisclosureRefusal(message, site=self.site, function=self.function, rule=rule, hint=hint)

    @property
    def q(self) -> int:
        return self.rules.disclosure.q_threshold

    def min_count(self, n: int, what: str = "valid values", *, allow_zero: bool = False) -> None:
        """Any aggregate rests on at least q records (rule A1 of seed 000; nfilter.tab); with
        ``allow_zero``, 0 records pass too (a factor level nobody has). In a pooled release the count
        is summed over the sites and the pooled count is checked (:meth:`pooled_minimum`)."""
        if self.deferred is not None:
            self.deferred.append((f"{'count_or_zero' if allow_zero else 'count'}:{what}", int(n)))
            return
        if allow_zero and n == 0:
            return
        if n < self.q:
            raise self._refuse(
                f"{what}: fewer than the site's minimum of {self.q}",
                "disclosure.q_threshold",
                "use a larger table or subset; this site releases nothing computed from fewer records",
            )

    def pooled_minimum(self, deferred: str, n: float, q: int) -> None:
        """A count deferred by :meth:`min_count` or :meth:`saturation`, summed over the sites of a
        pooled release: at least ``q`` (the largest q of the sites), or as many records as this
        site's ``glm_saturation`` needs for the model's parameters."""
        kind, what = deferred.split(":", 1)
        n = round(n)
        if kind == "saturation":
            self.saturation(int(what), n)
        elif not (kind == "count_or_zero" and n == 0) and n < q:
            raise self._refuse(f"{what}: fewer than the minimum of {q} pooled over the sites",
                               "disclosure.q_threshold", "use more records or more sites")

    def subset(self, n_subset: int, n_total: int) -> None:
        """A subset and the rows it leaves out each hold at least subset_min rows (or none)."""
        minimum = self.rules.disclosure.subset_min
        if n_subset < minimum:
            raise self._refuse(
                f"subset would hold fewer rows than the site's minimum of {minimum}",
                "disclosure.subset_min",
                "widen the subset condition",
            )
        left_out = n_total - n_subset
        if 0 < left_out < minimum:
            raise self._refuse(
                f"subset would leave out fewer rows than the site's minimum of {minimum}; "
                "comparing it with the full table would single them out",
                "disclosure.subset_min",
                "use the full table, or a condition that leaves out more rows",
            )

    def subset_rows(self, parent: Any, mask: np.ndarray) -> Any:
        """:meth:`subset`, then the subset is compared with the table it comes from and every
        subset of it the analyst made before (``disclosure.subset_min_difference``, see
        :mod:`dsfed_server.disclosure.differencing`). Returns the subset's rows, for
        ``differencing.mark_rows`` on the new table."""
        from dsfed_server.disclosure.differencing import Rows, rows_of

        mask = np.asarray(mask, dtype=bool)
        self.subset(int(mask.sum()), int(mask.size))
        parent_rows = rows_of(parent)
        rows = Rows(parent_rows.lineage, parent_rows.index[mask], parent_rows.n_root)
        if self.subsets is not None and self.scope is not None:
            minimum = self.rules.disclosure.subset_min_difference
            problem = self.subsets.check_and_add(self.scope.analyst, rows, minimum)
            if problem:
                raise self._refuse(problem, "disclosure.subset_min_difference",
                                   "use subsets that differ from each other by more rows, or the full table")
        return rows

    def reference_edges(self, p: np.ndarray, edges: np.ndarray,
                        root: tuple[str, np.ndarray | None] | None = None, x_sorted: np.ndarray | None = None
                        ) -> np.ndarray:
        """Which edges of an analyst's reference CDF this site evaluates at its scores ``p``:
        coarsened so that, with every reference the analyst used before on these scores (and on
        the table column ``root`` they come from, if any), its bins hold 0 or at least q records
        (:mod:`dsfed_server.disclosure.cuts`); every edge where the rules file's
        ``disclosure.coarsen_references`` is false (test profiles)."""
        from dsfed_server.disclosure.cuts import CutHistory  # noqa: PLC0415

        if not self.rules.disclosure.coarsen_references:
            return np.ones(np.size(edges), dtype=bool)
        history = self.cuts if self.cuts is not None else CutHistory()
        analyst = self.scope.analyst if self.scope is not None else None
        result = history.coarsen(analyst, p, np.asarray(edges, dtype=float), self.q, root, x_sorted)
        if isinstance(result, str):
            raise self._refuse(result, "disclosure.coarsen_references", "use a reference range that covers every score")
        return result

    def factor_levels(self, n_levels: int, n: int, what: str) -> None:
        """A factor has at most max_factor_levels levels and at most factor_levels_density * n."""
        d = self.rules.disclosure
        if n_levels > d.max_factor_levels:
            raise self._refuse(
                f"{what} has more levels than the site's maximum of {d.max_factor_levels}",
                "disclosure.max_factor_levels",
                "group levels into fewer categories",
            )
        if n_levels > d.factor_levels_density * n:
            raise self._refuse(
                f"{what} has more levels than {d.factor_levels_density:g} per record allows",
                "disclosure.factor_levels_density",
                "group levels into fewer categories",
            )

    def saturation(self, n_params: int, n: int) -> None:
        """A model's parameters are at most glm_saturation * n (nfilter.glm); pooled, n is the pooled count."""
        if self.deferred is not None:
            self.deferred.append(("saturation:" + str(n_params), int(n)))
            return
        ratio = self.rules.disclosure.glm_saturation
        if n_params > ratio * n:
            raise self._refuse(
                f"model has more parameters than {ratio:g} x the number of records allows",
                "disclosure.glm_saturation",
                "fit fewer parameters or use more records",
            )


    def mechanism(
        self, *, epsilon: float | None = None, delta: float | None = None, sensitivity: float | None = None
    ) -> AnalyticGaussian | None:
        """The site's DP mechanism. A client may ask for more privacy (smaller epsilon or delta,
        larger sensitivity), never for less: such a request is refused, never used.
        ``None`` when the rules file turns noise off (test profiles only)."""
        p = self.rules.privacy
        for name, value in (("epsilon", epsilon), ("delta", delta), ("sensitivity", sensitivity)):
            if value is not None and not value > 0:
                raise CallError(f"{name} must be positive, got {value}", site=self.site, function=self.function,
                                hint="omit the privacy parameters to use the site's")
        weaker = [
            ("privacy.epsilon", epsilon is not None and epsilon > p.epsilon, f"epsilon {epsilon} > {p.epsilon}"),
            ("privacy.delta", delta is not None and delta > p.delta, f"delta {delta} > {p.delta}"),
            ("privacy.score_l2_sensitivity", sensitivity is not None and sensitivity < p.score_l2_sensitivity,
             f"sensitivity {sensitivity} < {p.score_l2_sensitivity}"),
        ]
        for rule, is_weaker, detail in weaker:
            if is_weaker:
                raise self._refuse(
                    f"requested less privacy than the site allows ({detail})", rule,
                    "omit the privacy parameters to use the site's, or ask for more privacy",
                )
        if p.mechanism == "none":
            return None
        return AnalyticGaussian(
            epsilon=min(epsilon or p.epsilon, p.epsilon),
            delta=min(delta or p.delta, p.delta),
            sensitivity=max(sensitivity or 0.0, p.score_l2_sensitivity),
            share=self.noise_share,
        )

    def noisy(self, values: np.ndarray, label: str, mechanism: AnalyticGaussian | None, *,
              partition: str | None = None) -> np.ndarray:
        """The values, sorted (no record order is released), plus the mechanism's noise.

        The noise is seeded by the site secret, the function, the label, the
        mechanism's parameters and the sorted values themselves: asking again,
        under another symbol name or with the rows reordered, gets the same noise.

        Every noisy release is charged to the analyst's privacy budget on each site
        table the call read (:mod:`dsfed_server.disclosure.ledger`): checked here,
        before the noise is drawn (a release that would overspend raises
        :class:`~dsfed_server.errors.BudgetExceeded`), and spent by the service only
        once the call has succeeded. A release the analyst already received (same
        seed) costs nothing. Releases of one call that give the same ``partition``
        are about disjoint records (parallel composition: they cost the most
        expensive one); without a partition, each release is charged in full.
        """
        values = np.sort(np.asarray(values, dtype=float))
        if mechanism is None:
            return values
        seed_parts = (self.function, label, repr(mechanism), content_digest(values))
        if self.scope is not None:
            self.scope.check(self.function, self.scope.release_key(*seed_parts), mechanism, partition)
        rng = seeded_rng(self.secret, *seed_parts)
        return mechanism.randomise(values, rng)

    def check_analyst_data(self, params: Any = None, args: dict[str, Any] | None = None) -> None:
        """Analyst-supplied vectors (values derived from no site table, e.g. referenceScoresDS's
        table) are never combined record by record with site data in one call, unless the rules
        file's ``disclosure.combine_analyst_vectors`` allows it (dsBase#250: a 0/1 mask isolating
        one record in a sum). An analyst-supplied *table* passed to a table parameter (a lookup,
        such as the pooled reference scores of placementSumsDS) is not record by record."""
        scope = self.scope
        if scope is None or not scope.sources or self.rules.disclosure.combine_analyst_vectors:
            return
        aligned = scope.analyst_vectors > 0
        if params is not None and args is not None and scope.analyst_tables:
            from dsfed_server.registry import P

            aligned = aligned or any(
                p.type is not P.TABLE and id(args.get(p.name)) in scope.analyst_tables for p in params)
        if aligned:
            raise self._refuse(
                "a vector or table the analyst supplied cannot be combined record by record with this "
                "site's data: it could act as a mask that singles out a record",
                "disclosure.combine_analyst_vectors",
                "use variables of the site's tables; analyst-supplied values can only serve as lookups "
                "(e.g. the pooled reference scores)",
            )

