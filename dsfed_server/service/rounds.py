"""Secure rounds: an aggregate call's fields masked for a secure sum, or sealed for the other sites of
a pooled release or a relayed protocol (:mod:`dsfed_server.disclosure.relay`), and the second half
of a pooled release: the vectors the analyst relays opened, summed, checked against this site's
rules with the largest q of the sites and released, or the protocol's next step sealed."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Generator
from typing import Any

import numpy as np

from dsfed_core.calltree import Call
from dsfed_core.errors import CallError, DisclosureRefusal, SiteError
from dsfed_core.wire import MAX_RELAYED_CELLS
from dsfed_server.config import User
from dsfed_server.disclosure import declared, gate, relay, secure_sum, shared_tables
from dsfed_server.disclosure.checks import HistoryBehind
from dsfed_server.disclosure.differencing import SharedCell
from dsfed_server.disclosure.gate import Cut
from dsfed_server.disclosure.scope import CallScope
from dsfed_server.registry import FunctionSpec
from dsfed_server.service.calls import CallPipeline, CallRequest, canonical_call, definition, jsonable
from dsfed_server.service.state import SiteState
from dsfed_server.workspace import Session


def relayed_history(value: Any) -> dict[tuple[str, str], list[Cut]]:
    """The cut histories an analyst relays with a pooled release: ``[{"table", "column", "cuts":
    [[value, inclusive], ...]}, ...]`` (numbers and booleans only; checked, never evaluated)."""
    if value is None:
        return {}
    if not isinstance(value, list) or len(value) > 1000:
        raise CallError("pooled release: 'cuts' must be a list of {table, column, cuts}",
                        hint="relay the histories the sites answered with, unchanged")
    out: dict[tuple[str, str], list[Cut]] = {}
    for entry in value:
        table = entry.get("table") if isinstance(entry, dict) else None
        column = entry.get("column") if isinstance(entry, dict) else None
        cuts = entry.get("cuts") if isinstance(entry, dict) else None
        if not (isinstance(table, str) and isinstance(column, str) and isinstance(cuts, list) and len(cuts) <= 100_000):
            raise CallError("pooled release: a relayed history needs a table, a column and a list of cuts")
        parsed = []
        for cut in cuts:
            if not (isinstance(cut, list) and len(cut) == 2 and isinstance(cut[1], bool)
                    and isinstance(cut[0], (int, float)) and not isinstance(cut[0], bool) and math.isfinite(cut[0])):
                raise CallError("pooled release: a relayed cut is [value, inclusive] with a finite value")
            parsed.append(Cut(float(cut[0]), cut[1]))
        out[(table, column)] = sorted(set(parsed))
    return out


CELL_ID = re.compile(r"[0-9a-f]{32}")  # a pooled cell's identity (differencing.with_identities)


def relayed_cells(value: Any) -> list[SharedCell]:
    """The pooled cells released before that an analyst relays with a pooled release: ``[[identity, pooled
    count, column], ...]``, as the sites answered them (a hex string, a whole number and a string each;
    checked, never evaluated). A cell a site keeps otherwise, or not at all, it decides alone."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_RELAYED_CELLS:
        raise CallError("pooled release: 'cells' must be a list of [identity, count, column]",
                        hint="relay the cells the sites answered with, unchanged")
    out = []
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and CELL_ID.fullmatch(entry[0]) and isinstance(entry[1], int)
                and not isinstance(entry[1], bool) and 0 <= entry[1] < 2**53 and isinstance(entry[2], str)
                and len(entry[2]) <= 1000):
            raise CallError("pooled release: a relayed cell is [identity (hex), pooled count, column]",
                            hint="relay the cells the sites answered with, unchanged")
        out.append(SharedCell(entry[0], entry[1], entry[2]))
    return sorted(set(out), key=lambda c: (c.cell_id, c.count, c.column))


def same_levels(site: str, meta: dict[str, Any], relayed: Any) -> None:
    """Refuse to sum a pooled table whose level labels differ between sites (a stray ``"F "`` at one):
    its cells would not line up. Names the first site that differs and the levels only one side has.
    Runs before the relayed vectors are opened; a forged declaration can only make this refuse."""
    own = meta.get("levels")
    if own is None or not isinstance(relayed, dict):
        return
    for sender in sorted(relayed):
        entry = relayed[sender]
        theirs = entry.get("meta", {}).get("levels") if isinstance(entry, dict) else None
        if sender == site or theirs is None or theirs == own:
            continue
        differ = []
        for axis, (mine, other) in enumerate(zip(own, theirs)):
            only_here, only_there = [v for v in mine if v not in other], [v for v in other if v not in mine]
            if only_here or only_there or mine != other:
                where = f"variable {axis + 1}: " if len(own) > 1 else ""
                differ.append(f"{where}{site} has {mine}, {sender} has {other}"
                              + (f" (only at {site}: {only_here})" if only_here else "")
                              + (f" (only at {sender}: {only_there})" if only_there else ""))
        raise CallError(f"the sites' levels differ, so their tables cannot be summed cell by cell: "
                        f"{'; '.join(differ) or f'{len(own)} against {len(theirs)} variables'}",
                        hint="make the levels agree at every site (the same categories in each data dictionary; "
                             "trim or recode stray spellings), or ask per site (secure=False), where the client "
                             "aligns the levels")


class SecureRounds:
    """The secure-aggregation rounds of a session: sums masked, steps sealed, pooled steps released."""

    def __init__(self, state: SiteState, calls: CallPipeline) -> None:
        self.state = state
        self.calls = calls

    def _round(self, session: Session, option: dict[str, Any]) -> secure_sum.Round:
        round_id = secure_sum.check_round_id(option.get("round"))
        rnd = session.rounds.get(round_id)
        if rnd is None:
            raise CallError(f"no keys for secure-aggregation round {round_id} in this session",
                            hint="call secureKeyDS(round) at every site first")
        return rnd

    def _round_keys(self, session: Session, option: dict[str, Any], function: str, *, hiding: bool = True
                    ) -> tuple[secure_sum.Round, dict[str, bytes]]:
        """The session's keys for the option's round, and the roster's keys after every check; a sum
        that must hide each site (``hiding``) needs ``secure_aggregation.min_sites`` sites, a relayed
        protocol (checked per site) needs only its peers to be authentic."""
        rnd = self._round(session, option)
        least = self.calls.guard(function, session).min_sites() if hiding else 1
        return rnd, secure_sum.verify_roster(self.state.name, rnd, option.get("roster"), self.state.peers, least)

    def aggregate(self, user: User, session: Session, spec: FunctionSpec, node: Call,
                  request: CallRequest, scope: CallScope, record: dict) -> dict[str, Any]:
        """Run ``node`` and release only its summable fields, masked for a secure sum
        (:mod:`dsfed_server.disclosure.secure_sum`), or, with the ``pooled`` option, sealed for the
        other sites (:meth:`_seal_pooled`). DP noise is split as ``secure_aggregation.honest_sites`` says."""
        option = request.secure or {}
        if option.get("relayed"):
            return self._seal_relayed(user, session, spec, node, request, scope, record)
        if option.get("pooled"):
            return self._seal_pooled(user, session, spec, node, request, scope, record)
        if spec.secure_sum is None:
            offered = [s.name for s in self.state.registry if s.secure_sum is not None]
            hint = "ask for a pooled release (the 'pooled' option)" if spec.cells else \
                f"functions that do: {', '.join(offered)}"
            raise CallError(f"{spec.name} does not offer secure summation", hint=hint)
        guard = self.calls.guard(spec.name, session)
        rnd, keys = self._round_keys(session, option, spec.name)
        frac_bits = secure_sum.check_frac_bits(option.get("frac_bits", 24))
        step = secure_sum.use_step(rnd, option.get("step"))
        record["call"] += f" [secure sum over {','.join(sorted(keys))}, round {rnd.round_id[:8]}, step {step}]"
        result = jsonable(self.calls.invoke(session, node, noise_share=guard.noise_share_over(len(keys))))
        guard.peer_set(self.state.ledger.pin_peers(user.name, scope.sources, keys), keys, user.name)
        call = definition(canonical_call(request), session, scope)
        return secure_sum.masked_result(result, spec.secure_sum.fields, spec.secure_sum.public, site=self.state.name,
                                        rnd=rnd, keys=keys, step=step, frac_bits=frac_bits, call=call)

    def _seal_pooled(self, user: User, session: Session, spec: FunctionSpec, node: Call, request: CallRequest,
                     scope: CallScope, record: dict) -> dict[str, Any]:
        """First half of a pooled release (:mod:`dsfed_server.disclosure.relay`): run the call, seal this
        site's counts and sums for the other sites, and keep how to release them once they are pooled."""
        if not spec.poolable:
            offered = [s.name for s in self.state.registry if s.poolable]
            raise CallError(f"{spec.name} does not offer pooled release",
                            hint=f"functions that do: {', '.join(offered)}")
        reader = self.calls.guard(spec.name, session)  # what the service reads of the rules, read through the Guard
        option = request.secure or {}
        rnd, keys = self._round_keys(session, option, spec.name)
        if not (reader.checks_pooled() and all(rnd.pooled_peers.values())):
            who = "this site" if not reader.checks_pooled() else ", ".join(
                sorted(s for s, v in rnd.pooled_peers.items() if not v))
            raise DisclosureRefusal(
                f"a pooled release needs every site of the round to check the pooled cells; {who} does not",
                rule="secure_aggregation.pooled_thresholds",
                hint="ask per site (without the pooled option), or ask the sites' governance to set pooled_thresholds")
        frac_bits = asked_bits = secure_sum.check_frac_bits(option.get("frac_bits", 24))
        step = secure_sum.use_step(rnd, option.get("step"))
        record["call"] += f" [pooled over {','.join(sorted(keys))}, round {rnd.round_id[:8]}, step {step}: sealed]"
        deferred: list[tuple[str, int]] = []
        noise = reader.noise_share_over(len(keys))
        relayed = relayed_history(option.get("cuts"))
        cells = relayed_cells(option.get("cells"))
        try:
            raw = self.calls.invoke(session, node, noise_share=noise, deferred=deferred, relayed_cuts=relayed,
                                    relayed_cells=cells)
            kind = spec.release_of(raw)
            guard = self.calls.guard(spec.name, session, relayed_cuts=relayed, relayed_cells=cells)
            # intervals on a column are checked against the cuts released on it before, at every site
            history = guard.pooled_history(raw.history_key) if isinstance(raw, gate.Intervals) else ()
        except HistoryBehind as behind:  # the analyst relays the union next time; nothing is sealed
            return {"history": self._history_answer(behind.key)}
        reader.peer_set(self.state.ledger.pin_peers(user.name, scope.sources, keys), keys, user.name)
        history_key = raw.history_key if isinstance(raw, gate.Intervals) else None
        if kind == "cells":
            plan, fields = gate.pooled_vector(raw, history, dominance=reader.declared_floor()["dominance"] > 0)

            def finish(pooled: dict[str, np.ndarray], floor: gate.Floor) -> Any:
                def released(release: gate.PooledRelease) -> Any:
                    if isinstance(raw, gate.Intervals):
                        guard.record_pooled(raw.history_key, release.root_cuts)
                        if raw.on_pooled is not None:
                            raw.on_pooled(release)
                    return release.result

                return None, guard.coarsened(
                    lambda exclude, kept_pooled: gate.release_pooled(raw, plan, pooled, floor, exclude, kept_pooled),
                    raw.rows, released, shared=floor)
        elif kind == "steps":
            fields, finish = raw.fields, raw.advance
            frac_bits = raw.frac_bits if raw.frac_bits is not None else asked_bits
            history_key = raw.history_key
        else:
            result = jsonable(raw)
            fields = {name: np.asarray(result[name], dtype=float)
                      for name in spec.secure_sum.fields if name in result}  # type: ignore[union-attr]
            public = {name: result[name]
                      for name in spec.secure_sum.public if name in result}  # type: ignore[union-attr]

            def finish(pooled: dict[str, np.ndarray], floor: gate.Floor) -> Any:
                return {**public, **{name: v.tolist() if v.ndim else float(v) for name, v in pooled.items()},
                        "pooled": True}
        fields = {**fields, **{f"min:{i}:{what}": np.asarray(float(n)) for i, (what, n) in enumerate(deferred)}}
        call = definition(canonical_call(request), session, scope) + "\0cuts:" + json.dumps(
            {f"{t}${c}": [[v.value, v.inclusive] for v in cuts] for (t, c), cuts in sorted(relayed.items())}
        ) + "\0cells:" + json.dumps([[c.cell_id, c.count, c.column] for c in cells])
        digest = secure_sum.call_digest(call, frac_bits)  # the relay too: every site bins and pairs alike
        meta = reader.declared_floor()
        if isinstance(raw, gate.Intervals):
            meta.update(gate.dictionary_meta(raw.column))
        if isinstance(raw, gate.Categories) and raw.labels:
            meta["levels"] = [list(axis) for axis in raw.labels]
        return self._seal(rnd, keys, step, spec.name, digest, fields, finish, frac_bits, meta,
                          frozenset(scope.sources), history_key, asked_bits=asked_bits)

    def _seal_relayed(self, user: User, session: Session, spec: FunctionSpec, node: Call, request: CallRequest,
                      scope: CallScope, record: dict) -> dict[str, Any]:
        """First step of a relayed protocol (:mod:`dsfed_server.disclosure.relay`): as a pooled one,
        the sites derive every step's parameters from the summed step before, never taking them
        from the analyst (data-dependent parameters come from the sites), but every count is checked
        here, per site, before anything is sealed, and the round needs no more sites than its peers (a
        GLM fit at two sites, or at sites that check per site only). The analyst receives the sums over the sites.
        Over ``secure_aggregation.min_sites`` sites or more, which hide each site's share, the round goes over the
        table's one set of peers, as secure sums do (:meth:`~dsfed_server.disclosure.checks.Guard.peer_set`): the
        other sites' own parts at a fit's estimate take this site's out of the sum, as often as the smallest of
        them affords, and another set of peers would afford as many again."""
        if not spec.relayable:
            offered = ", ".join(s.name for s in self.state.registry if s.relayable)
            raise CallError(f"{spec.name} does not offer a relayed protocol", hint=f"functions that do: {offered}")
        option = request.secure or {}
        rnd, keys = self._round_keys(session, option, spec.name, hiding=False)
        frac_bits = secure_sum.check_frac_bits(option.get("frac_bits", 24))
        step = secure_sum.use_step(rnd, option.get("step"))
        record["call"] += f" [relayed over {','.join(sorted(keys))}, round {rnd.round_id[:8]}, step {step}: sealed]"
        guard = self.calls.guard(spec.name, session)
        hidden = len(keys) >= guard.min_sites()
        raw = self.calls.invoke(session, node, relayed=True, hidden=hidden, beside=len(keys) > 1)
        if hidden:  # the tables the call read, as a secure sum's
            guard.peer_set(self.state.ledger.pin_peers(user.name, scope.sources, keys), keys, user.name)
        if spec.release_of(raw) != "steps":
            raise CallError(f"{spec.name} with these arguments is no protocol of several steps, so it is not relayed",
                            hint="leave out the arguments the sites derive themselves (glmDS2: beta.vect)")
        digest = secure_sum.call_digest(definition(canonical_call(request), session, scope) + "\0relayed",
                                        raw.frac_bits if raw.frac_bits is not None else frac_bits)
        return self._seal(rnd, keys, step, spec.name, digest, raw.fields, raw.advance,
                          raw.frac_bits if raw.frac_bits is not None else frac_bits,
                          guard.declared_floor(pooled=False), frozenset(scope.sources),
                          raw.history_key, relayed=True, asked_bits=frac_bits)

    def _seal(self, rnd: secure_sum.Round, keys: dict[str, bytes], step: int, function: str, digest: bytes,
              fields: dict[str, np.ndarray], finish: Any, frac_bits: int, meta: dict[str, Any],
              sources: frozenset, history_key: tuple[str, str] | None = None, relayed: bool = False,
              asked_bits: int | None = None, held: Any = None) -> dict[str, Any]:
        """Encode ``fields`` in fixed point, mask them, seal them for every peer and keep them (with
        ``finish``, what the pooled vector becomes) until the analyst relays the others'. A step on a
        table column carries this site's share of the key of the gate's draws (:func:`gate.nonce`)."""
        name = self.state.name
        if history_key is not None:
            shared_tables.check_round(history_key, keys)  # a label names the round's sites, no others
            fields = {**fields, gate.NONCE: gate.nonce(self.state.secret, history_key)}
        layout = {field: list(np.shape(v)) for field, v in fields.items()}
        flat = [secure_sum.encode_fixed(np.ravel(v), frac_bits, len(keys)) for v in fields.values()]
        clipped = sum(c for _, c in flat)
        encoded = np.concatenate([v for v, _ in flat] + [np.array([clipped], dtype=np.uint64)])
        masked = encoded + secure_sum.mask(name, rnd, keys, step, digest, encoded.size)
        while len(rnd.pending) >= relay.MAX_PENDING:
            rnd.pending.pop(next(iter(rnd.pending)))
        rnd.pending[step] = relay.PendingStep(function, digest, masked, layout, frac_bits, meta, finish, sources,
                                              history_key, relayed, asked_bits, held)
        return {"pooled": {"round": rnd.round_id, "step": step, "site": name, "meta": meta,
                           "sealed": relay.seal(name, rnd, keys, step, digest, masked, meta)}}

    def release_pooled(self, user: User, sid: str, option: dict[str, Any]) -> dict[str, Any]:
        """Second half of a pooled release: open the vectors the other sites sealed for this site (the
        analyst relays them), add them to this site's own, check the pooled cells against this site's
        rules with the largest q of the sites, and release the pooled result (the same at every site):
        ``{"release": ...}``, with ``"continue"``: this site's sealed next step of a protocol of several
        steps, or ``"clipped"``: how many values did not fit the fixed-point range (nothing released)."""
        step = option.get("step")
        with self.state.audited(user, sid, "pooledRelease", "aggregate", f"step {step}") as record:
            session = self.state.sessions.get(sid, user.name)
            with session.lock:
                rnd = self._round(session, option)
                pending = rnd.pending.pop(step, None) if isinstance(step, int) else None
                if pending is None:
                    raise CallError(f"no sealed pooled step {step!r} in round {rnd.round_id} of this session",
                                    hint="seal the step first (the 'pooled' option), then relay every site's answer "
                                         "once")
                _, keys = self._round_keys(session, option, pending.function, hiding=not pending.relayed)
                record["function"] = pending.function
                record["call"] = f"{pending.function} [{'relayed' if pending.relayed else 'pooled'} over " \
                                 f"{','.join(sorted(keys))}, round {rnd.round_id[:8]}, step {step}: released]"
                try:
                    return self._open_pooled(session, rnd, keys, step, pending, option)
                except SiteError as exc:
                    raise exc.at(site=self.state.name, function=pending.function)

    def _open_pooled(self, session: Session, rnd: secure_sum.Round, keys: dict[str, bytes], step: int,
                     pending: relay.PendingStep, option: dict[str, Any]) -> Any:
        same_levels(self.state.name, pending.meta, option.get("relay"))
        total, metas = relay.open_relay(self.state.name, rnd, keys, step, pending, option.get("relay"))
        fields, clipped = relay.decode(total, pending.layout, pending.frac_bits)
        if clipped:  # the analyst learns how many values did not fit, not where: it asks again with fewer bits
            return {"release": None, "clipped": clipped}
        floor = gate.pooled_floor(metas, fields)  # takes the key's shares out of the fields
        guard = self.calls.guard(pending.function, session)
        for name in [name for name in fields if name.startswith("min:")]:
            guard.pooled_minimum(name.split(":", 2)[2], float(fields.pop(name)), floor.q)  # min:<i>:<kind>:<what>
        out = pending.finish(fields, floor)
        if isinstance(out, Generator):  # a protocol's step that declares releases part-way
            out = declared.run(out, guard)
        history = {} if pending.history_key is None else {"history": self._history_answer(pending.history_key)}
        release, following = out if isinstance(out, tuple) else (out, None)  # steps: relay.PooledSteps
        now = {"release": jsonable(release)}
        if isinstance(release, relay.Recorded):  # with the cells every site recorded, for the analyst to relay
            now = {"release": jsonable(release.result), "cells": release.cells}
        given, held = (now, None) if pending.relayed else (pending.held or {"release": None},
                                                           None if release is None else {**now, **history})
        if held is not None:  # the cuts it recorded leave with it, not before
            history = {}
        if following is None and held is None:
            return {**given, **history}
        if following is None:  # one more step, of nothing: it opens only once every site has recorded ``held``
            following = relay.PooledSteps({}, lambda pooled, floor: (None, None), frac_bits=0)
        next_step = secure_sum.use_step(rnd, option.get("next_step"))
        digest = hashlib.sha256(pending.call + b"\0next").digest()  # the same at every site of the round
        asked = pending.asked_bits if pending.asked_bits is not None else pending.frac_bits
        frac_bits = following.frac_bits if following.frac_bits is not None else asked
        sealed = self._seal(rnd, keys, next_step, pending.function, digest, following.fields, following.advance,
                            frac_bits, pending.meta, pending.sources, following.history_key or pending.history_key,
                            pending.relayed, asked_bits=asked, held=held)
        return {**given, "continue": sealed["pooled"], **history}

    def _history_answer(self, key: tuple[str, str]) -> dict[str, Any]:
        """This site's cut history of a column, as a pooled release's answers carry it (the analyst
        relays the union of the sites' histories with the next pooled release on the column)."""
        own = shared_tables.own_key(key, self.state.name)
        return {"table": key[0], "column": key[1],
                "cuts": [[c.value, c.inclusive] for c in self.state.history.cuts(*own)]}
