"""The schema of a site's rules file (``disclosure_rules/*.toml``).

Every key is required: the file a governance board signs off is the whole
truth, and the code holds no hidden defaults. ``default.toml`` ships the
conservative values. Each field's description says, in plain words, what the
key protects against; ``dsfed rules explain`` prints them.

A rules file may also name **profiles** (as Opal's DataSHIELD profiles): an
optional ``[profiles.NAME]`` table with its own ``enabled`` functions and,
optionally, ``[profiles.NAME.disclosure]`` / ``[profiles.NAME.bins]`` keys
that override the site's. A profile can only make the rules stricter (an
analyst chooses the profile when opening a session, so a profile must never
release more than the site's own rules). The ``default`` profile is the
file's top-level rules.

Each key is declared once, in the section classes below: its type, its bounds, which way a
profile may move it (:class:`Stricter`, in the annotation) and its description. The profile
check, ``dsfed rules explain`` and the key tables of docs/governance.md are read from these
declarations; the defaults are ``default.toml``'s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic.fields import FieldInfo

from dsfed_server.tomlfile import ConfigFileError, load_toml_model, locate


@dataclass(frozen=True)
class Stricter:
    """Which way a profile may move a rules key, declared with the key
    (``q_threshold: Annotated[int, HIGHER] = Field(...)``).

    ``way`` is ``"higher"`` or ``"lower"`` (the values that way are stricter), ``"only"`` (only
    ``value`` is stricter: a switch or a policy) or ``"fixed"`` (a profile cannot set the key; the
    site's value holds in every profile).
    """

    way: Literal["higher", "lower", "only", "fixed"]
    value: bool | str | None = None

    def looser(self, site: Any, value: Any) -> bool:
        """Whether ``value``, set by a profile, is less strict than the site's own ``site``."""
        if self.way == "higher":
            return bool(value < site)
        if self.way == "lower":
            return bool(value > site)
        if self.way == "only":
            return value != self.value and site == self.value
        return True  # fixed: any value a profile sets is the site's decision taken away

    def __str__(self) -> str:
        """What a profile may do with the key, completing "a profile may ..."."""
        if self.way == "higher":
            return "raise it"
        if self.way == "lower":
            return "lower it"
        if self.way == "only":
            return f"set it to {json.dumps(self.value)}"
        return "not set it"


HIGHER = Stricter("higher")
LOWER = Stricter("lower")
FIXED = Stricter("fixed")


def only(value: bool | str) -> Stricter:
    """A key of which only ``value`` is stricter (``cut_history``: only true)."""
    return Stricter("only", value)


def stricter(info: FieldInfo) -> Stricter:
    """The direction declared with a rules key (every key of a section declares one)."""
    found = [m for m in info.metadata if isinstance(m, Stricter)]
    if len(found) != 1:
        raise TypeError(f"a rules key declares one Stricter in its annotation, not {len(found)}")
    return found[0]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _RulesSection(_Section):
    """A ``[section]`` of the rules file: each key declares which way is stricter, or the class
    is not created."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for key, info in cls.model_fields.items():
            try:
                stricter(info)
            except TypeError as exc:
                raise TypeError(f"{cls.__name__}.{key}: {exc}") from None


class Disclosure(_RulesSection):
    q_threshold: Annotated[int, HIGHER] = Field(
        ge=1,
        le=1000,
        description=(
            "Minimum number of records behind any aggregate, and minimum count of every "
            "non-zero cell of a table (DataSHIELD nfilter.tab; the ROC-GLM paper's analysis uses 5). "
            "Protects against singling out a person from a small count or mean."
        ),
    )
    subset_min: Annotated[int, HIGHER] = Field(
        ge=1,
        le=1000,
        description=(
            "Minimum number of rows in a subset created on the site, and in the rows it leaves "
            "out (DataSHIELD nfilter.subset). Protects against differencing a small subset "
            "against its complement."
        ),
    )
    subset_min_difference: Annotated[int, HIGHER] = Field(
        ge=1,
        le=1000,
        description=(
            "Row sets released from one table (subsets, and the cells of every binned release or "
            "table, on any column, by any analyst) must differ from the table and from each other "
            "in at least this many rows (or none), and no combination of them may single out one "
            "record. Protects against differencing two overlapping subsets (age >= 50 and "
            "age >= 51), or the same cell on the table and on a subset, to get one person's value."
        ),
    )
    combine_analyst_vectors: Annotated[bool, only(False)] = Field(
        description=(
            "Whether a vector or table the analyst supplied (e.g. the table of referenceScoresDS) "
            "may be combined record by record with site data in one call. false protects against "
            "a 0/1 mask that picks out one record in a sum or mean (dsBase#250); lookups such as "
            "the pooled reference scores stay allowed."
        ),
    )
    cut_history: Annotated[bool, only(True)] = Field(
        description=(
            "Whether every cut a release depends on -- bin edges, group breaks, thresholds, the edges "
            "of a reference CDF, subset conditions -- is checked against every cut released before on "
            "the same table column, by any analyst, kept in the site's ledger across restarts: a cut "
            "is released only where all cuts together leave at least q_threshold records between "
            "them (otherwise the release is coarsened, or refused), so no two releases can be "
            "differenced into fewer than q records; an empty bin between two cuts is merged too (of "
            "the two cuts one is kept, at random), so that 'empty' and 'one record' answer alike. "
            "false: each release is checked alone (test "
            "profiles that prove equality with R on one table only)."
        ),
    )
    cut_margin: Annotated[int, HIGHER] = Field(
        ge=0,
        le=1000,
        description=(
            "With cut_history: a new cell between cuts must hold q_threshold records plus a margin "
            "the site draws for that cell, 0 to cut_margin records (geometric, each extra record "
            "half as likely), with a key only the site holds; the same cell always draws the same. "
            "A cell of q_threshold + cut_margin records or more is always released. Protects "
            "against an analyst who knows every record but one: with a fixed minimum, which of "
            "their cuts first reached q records shows the rank of the last record. 0: a fixed "
            "minimum."
        ),
    )
    glm_saturation: Annotated[float, LOWER] = Field(
        gt=0,
        le=1,
        description=(
            "A model may have at most this fraction of the records as parameters "
            "(DataSHIELD nfilter.glm). Protects against saturated models whose fit "
            "reproduces individual outcomes."
        ),
    )
    glm_analyst_coefficients: Annotated[bool, only(False)] = Field(
        description=(
            "Whether glmDS2 evaluates a model at coefficients the analyst sends (dsBase's protocol, "
            "which the unmodified DataSHIELD client needs, and dsfed's per-site fit). false: only "
            "fits whose every iterate the sites derive themselves from pooled sums (the pooled "
            "fit) are answered. Protects against every channel that analyst-chosen coefficients "
            "open, including those glm_max_linear_predictor cannot bound (see docs/governance.md)."
        ),
    )
    glm_peer_ratio: Annotated[float, LOWER] = Field(
        ge=1,
        le=1000,
        description=(
            "A fit over this site's whole table summed with other sites' (pooled, or relayed over at least "
            "secure_aggregation.min_sites sites) counts its end here -- the score equations, information and "
            "deviance at the estimate, p(p+1)/2 + p + 1 functions of each column of the model, each as 1/this of "
            "one, against sums_per_record -- where the other sites' counts afford on average more than this many "
            "times this site's over the records it fits (their sums_per_record times the records of their tables, "
            "whatever subsets they fit; without bound at a site that keeps no history). Their own parts at the "
            "fit's last coefficients, released per site and counted there, take this site's out of the sum; the "
            "smallest of them can afford at most its own count of such ends, so where they afford less, fits over "
            "this table go over the same tables of theirs every time. Either way a site's records answer at most "
            "this times sums_per_record such functions each (see docs/governance.md). Protects a small site beside "
            "large ones."
        ),
    )
    glm_max_linear_predictor: Annotated[float, LOWER] = Field(
        gt=0,
        le=30,
        description=(
            "Largest |linear predictor| that coefficients from the analyst may give any record "
            "whose values lie within the ranges the data dictionary declares (for a link whose "
            "inverse R clamps, such as probit at about 8.1, the smaller of the two). Computed from "
            "the declared ranges, never from the records, so a refusal tells nothing about them; a "
            "covariate without a declared range cannot be bounded and is refused. Protects against "
            "coefficients that saturate the linear predictor into a step at one record's value, "
            "where the difference of two deviances gives that record's outcome."
        ),
    )
    derived_concentration: Annotated[float, LOWER] = Field(
        ge=1,
        le=1000,
        description=(
            "How concentrated a column computed from another (deriveDS, ds.make, a model formula's I(), "
            "log(), sqrt(), exp() terms) may be over that column's declared range: the largest share of "
            "the function's total variation in any part of the range, divided by the square root of that "
            "part's share of the range. A straight line or a square root scores 1, log(x + 1) on [0, 50] "
            "about 1.5, exp(x/5) on [0, 100] about 2.9; a step, a kink, a spike or a steep ramp grows "
            "without bound as it narrows. Protects against cuts in disguise -- (x - t)/sqrt((x - t)^2), "
            "2/(1 + exp(1e9*(t - x))) - 1 -- whose exact sums count and read the records next to a value the "
            "analyst chose (the ends of the range are derived_dominance's); comparisons, ifelse, pmin, pmax and abs "
            "are cuts the release gate checks instead. Functions that rise and fall (a bump) are refused unless "
            "they are polynomials of degree 3 at most; non-linear functions of several columns are "
            "refused (see docs/governance.md)."
        ),
    )
    derived_dominance: Annotated[float, LOWER] = Field(
        ge=2,
        le=1e6,
        description=(
            "How far a column computed from another may lie from its median somewhere in that column's "
            "declared range, against how far it typically lies (uniformly over the range): a record there "
            "weighs that many records in a sum. A straight line scores 2, log(x + 1) on [0, 50] about 6, "
            "exp(x/10) on [0, 100] about 10; log(x - t) just above t, 1/x near 0 or a steep exponential grow "
            "without bound. Protects against spikes and exponentials that make a sum, or a difference of "
            "sums, one record's value (the record next to the spike, or the largest)."
        ),
    )
    sums_per_record: Annotated[float, LOWER] = Field(
        ge=0,
        le=1,
        description=(
            "Functions of a column a group of records may answer by exact sums, per record, beyond the means, "
            "variances and covariances any group that passed the gate answers: exact sums of m different functions "
            "of a column (x^3, exp(k*x), log(x + c), ...) over a group of m records give its m values, as power "
            "sums give a polynomial's roots, and with sums of products the records. The site counts, for all "
            "analysts, the functions summed over each group the released row sets single out, up to a straight "
            "line in each (2*log(x) + 1 is log(x)), a derived column summand by summand over the records where "
            "each summand is not 0, and refuses a sum that would give a group more than this share of its "
            "values. Protects against the moment attack on small subsets and cells "
            "(see docs/governance.md)."
        ),
    )
    quantile_min_multiple: Annotated[float, HIGHER] = Field(
        ge=1,
        le=100,
        description=(
            "Quantiles (quantileMeanDS) are released only for at least this multiple of "
            "q_threshold values. Seven type-7 quantiles and the mean are eight linear equations in "
            "the order statistics: on about eight values they give most values exactly, the "
            "minimum and maximum among them."
        ),
    )
    max_factor_levels: Annotated[int, LOWER] = Field(
        ge=2,
        le=10000,
        description=(
            "Most levels a factor may have to be tabulated or used in a model "
            "(DataSHIELD nfilter.levels.max). Protects against near-unique categories."
        ),
    )
    factor_levels_density: Annotated[float, LOWER] = Field(
        gt=0,
        le=1,
        description=(
            "A factor may have at most this fraction of the records as levels "
            "(DataSHIELD nfilter.levels.density); in a pooled release, of the records pooled "
            "over the sites. Protects against categories that identify single records."
        ),
    )


class Bins(_RulesSection):
    small_bin_policy: Annotated[Literal["refuse", "merge"], only("refuse")] = Field(
        description=(
            "What a histogram does with a bin holding 0 < n < q_threshold records: 'refuse' "
            "refuses the whole histogram; 'merge' joins the small bin with a neighbour until "
            "every non-empty bin reaches q_threshold. Protects against locating single records."
        ),
    )


class Strings(_RulesSection):
    max_length: Annotated[int, FIXED] = Field(
        ge=1,
        le=10000,
        description=(
            "Longest string argument (or call text) accepted (DataSHIELD nfilter.string). "
            "Protects against code smuggled inside long arguments."
        ),
    )
    max_name_length: Annotated[int, FIXED] = Field(
        ge=1,
        le=1000,
        description=(
            "Longest symbol, column or table name accepted (DataSHIELD nfilter.stringShort). "
            "Protects against data or code smuggled inside names."
        ),
    )


class Parser(_RulesSection):
    max_depth: Annotated[int, FIXED] = Field(
        ge=1,
        le=50,
        description=(
            "Deepest nesting of calls and vectors accepted in one call. Protects the parser "
            "against resource exhaustion by deeply nested expressions."
        ),
    )


class Privacy(_RulesSection):
    mechanism: Annotated[Literal["analytic_gaussian", "none"], FIXED] = Field(
        description=(
            "Noise added to record-level values released under differential privacy: "
            "'analytic_gaussian' (Balle & Wang 2018); 'none' only for test profiles, and "
            "then no_noise_acknowledged must say why."
        ),
    )
    epsilon: Annotated[float, FIXED] = Field(
        gt=0,
        le=100,
        description=(
            "Privacy loss epsilon charged per noisy query: how much one noisy answer may reveal "
            "about any one person. Smaller means more noise and more privacy."
        ),
    )
    delta: Annotated[float, FIXED] = Field(
        gt=0,
        lt=1,
        description="Probability delta that the epsilon guarantee fails, per noisy query.",
    )
    score_l2_sensitivity: Annotated[float, FIXED] = Field(
        gt=0,
        description=(
            "How much one person's record can change the released prediction scores (their "
            "l2-sensitivity), as this site asserts it; the noise is scaled to it. A client can never "
            "lower it. Protects against an analyst asking for too little noise."
        ),
    )
    score_columns: Annotated[tuple[str, ...], FIXED] = Field(
        description=(
            "The table columns that hold prediction scores: the only values noisyScoresDS "
            "releases (a column, a subset of it, or a monotone transform of it), clipped to the "
            "range the data dictionary declares for the column, so the noise sized by "
            "score_l2_sensitivity is never put on another column (an income). A listed column "
            "without a declared range is refused."
        ),
    )
    no_noise_acknowledged: Annotated[str, FIXED] = Field(
        description=(
            "Must be empty unless mechanism = 'none'; then a sentence saying why this "
            "site releases un-noised values (test profiles only)."
        ),
    )

    @model_validator(mode="after")
    def _noise_off_is_loud(self) -> "Privacy":
        if self.mechanism == "none" and not self.no_noise_acknowledged.strip():
            raise ValueError("mechanism = 'none' requires no_noise_acknowledged to explain why")
        if self.mechanism != "none" and self.no_noise_acknowledged.strip():
            raise ValueError("no_noise_acknowledged must be empty unless mechanism = 'none'")
        return self


class Budget(_RulesSection):
    epsilon_per_table: Annotated[float, FIXED] = Field(
        gt=0,
        description=(
            "Total epsilon all analysts together may spend on one table at this site, over all noisy "
            "answers (composed by the tighter of basic composition and Renyi-DP accounting; repeating "
            "a question, from any account, costs nothing). A query that would exceed it is refused. "
            "Protects against averaging away the noise over many queries, and against colluding "
            "accounts that would each get a fresh budget on the same records."
        ),
    )
    delta_per_table: Annotated[float, FIXED] = Field(
        gt=0,
        lt=1,
        description=(
            "Total delta all analysts together may spend on one table at this site: the probability "
            "that the total epsilon guarantee fails."
        ),
    )
    epsilon_per_analyst: Annotated[float, FIXED] = Field(
        gt=0,
        description=(
            "The part of epsilon_per_table one analyst may spend on one table (at most "
            "epsilon_per_table), so one analyst cannot use a table's budget up for everyone."
        ),
    )
    delta_per_analyst: Annotated[float, FIXED] = Field(
        gt=0,
        lt=1,
        description="The part of delta_per_table one analyst may spend on one table (at most delta_per_table).",
    )
    warn_share: Annotated[float, FIXED] = Field(
        gt=0,
        le=1,
        description=(
            "Warn an analyst before a noisy call that would use more than this share of the epsilon "
            "that remains of their budget, or of the table's, on a table it reads (the increase of the "
            "spent epsilon in the ledger's accounting, against what remains). The site states it with "
            "every cost preview and budget listing; the analyst's client previews each noisy call and "
            "issues a BudgetWarning first. Protects the budget from being used up unawares."
        ),
    )

    @model_validator(mode="after")
    def _analyst_within_table(self) -> "Budget":
        if self.epsilon_per_analyst > self.epsilon_per_table or self.delta_per_analyst > self.delta_per_table:
            raise ValueError("an analyst's budget (epsilon_per_analyst, delta_per_analyst) must not exceed the "
                             "table's (epsilon_per_table, delta_per_table)")
        return self


class SecureAggregation(_RulesSection):
    min_sites: Annotated[int, FIXED] = Field(
        ge=2,
        le=1000,
        description=(
            "Fewest sites, this one included, whose contributions one secure sum may combine "
            "(secureKeyDS and the 'secure' option of aggregate calls): the analyst sees only "
            "the sum. With two sites each could subtract its own share, so 3 is the least that "
            "hides a site from the others too. A site also takes part in secure sums, pooled "
            "releases and relayed fits over min_sites sites or more on one table with one set of "
            "peers only, whichever analyst asks: two sums over different site sets would let their "
            "difference isolate fewer sites, and other sites' own parts take a site's out of a fit "
            "beside each set."
        ),
    )
    honest_sites: Annotated[int, FIXED] = Field(
        ge=1,
        le=1000,
        description=(
            "Sites assumed not to collude with the analyst when differential-privacy noise is "
            "added under secure aggregation: this site adds noise of variance sigma^2 / h, "
            "h = min(honest_sites, sites in the sum), so the sum carries the full noise sigma^2 "
            "of the site's (epsilon, delta) when at least h of its sites are honest. 1: every "
            "site adds its full noise (relies on no other site)."
        ),
    )
    require: Annotated[bool, FIXED] = Field(
        description=(
            "true: functions that offer secure summation refuse the plain per-site release; "
            "the analyst receives only sums over sites."
        ),
    )
    pooled_thresholds: Annotated[bool, FIXED] = Field(
        description=(
            "true: a binned or tabulated release under secure aggregation (tables, histograms, "
            "calibration bins, Hosmer-Lemeshow groups, placement sums) is checked on the pooled "
            "cells, which are what the analyst sees: the sites sum the counts among themselves first "
            "(sealed so that the analyst cannot read or forge them), each site checks every pooled "
            "cell against its q_threshold, and only then are the cells released, pooled. A site's "
            "own share of a cell may then hold fewer than q records. Used only when every site of "
            "the sum has it true (each signs it with its key). Such a share stays pooled: a cell (or a "
            "run of up to 64 adjacent bins, fewer of many bins, a row or column of a table) whose "
            "records that no site's releases alone give are 1 to q - 1 is merged (a table refused), and "
            "a site does not release "
            "alone (cells, subsets, exact sums) its records of a pooled cell in which another site held 1 "
            "to q - 1 records, so the pooled count less the other sites' own never gives them; nor a union "
            "of pooled cells no span stands for (bins apart, some of a row's cells) where a cell in it was "
            "thin, in either order, a cell or subset of a derived column of several roots counted as its parts "
            "in each group its few-valued roots and comparisons make. A span whose share at one site the "
            "others' releases alone would leave (their shares given, or none) is audited as that site's "
            "release alone, and merged "
            "(a table refused) where it would fail; the site keeps its records of such cells (and their "
            "events) and audits its later subsets, derived columns, exact sums and pooled shares against them. "
            "What it "
            "does not protect: a pooled cell that one site holds entirely is no different from that site "
            "releasing it alone. "
            "false: each site applies its rules to its own contribution before masking."
        ),
    )
    dominance_sites: Annotated[int, FIXED] = Field(
        ge=0,
        le=100,
        description=(
            "With pooled_thresholds: a pooled cell is released only if it holds at least q_threshold "
            "records outside its dominance_sites largest contributing sites (0: no such rule). Each site "
            "adds its cell counts squared to the pooled vector; a bound on the k largest contributions "
            "computed from their sum can only over-estimate them, so a cell that passes holds q records "
            "of the other sites; one that does not is merged with its neighbour (bins) or refuses the "
            "release (tables). Protects against a member site whose table is padded with made-up records "
            "in every cell, so that pooled cells pass q while holding one record of the honest sites. "
            "Not against a member that hands the analyst what it decodes in the protocol (the pooled "
            "counts and sums of every refined cell): a board that does not trust its peers sets "
            "pooled_thresholds = false (see docs/governance.md, member sites)."
        ),
    )


class ApprovedModel(_Section):
    """One model the site's governance board approved (``dsfed models approve`` writes the entry)."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$",
                      description="The short name analysts give predictDS (model = \"NAME\").")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$",
                        description="SHA-256 of the model's canonical bytes (dsfed models inspect FILE shows it).")
    note: str = Field(max_length=2000, description="What the model is and why the board approved it.")


class Models(_RulesSection):
    analyst_glm: Annotated[bool, FIXED] = Field(
        description=(
            "Whether an analyst may apply a GLM of their own (formula, family, link and coefficients "
            "only: no code) without the board's approval. false: only the models listed below."
        ),
    )
    max_bytes: Annotated[int, FIXED] = Field(
        ge=100,
        le=100_000_000,
        description="Largest model file an analyst may upload, in bytes.",
    )
    onnx: Annotated[bool, FIXED] = Field(
        description=(
            "Whether the site applies ONNX graphs (run by onnxruntime) as well as GLM files: only "
            "the standard ONNX and ONNX-ML operators of dsfed_server/onnx_ops.py, no custom "
            "operators, functions or external data, each graph input a table column whose type, "
            "categories and unit match the data dictionary, and always with the board's approval. "
            "false: GLM files only."
        ),
    )
    approved: Annotated[tuple[ApprovedModel, ...], FIXED] = Field(
        description=(
            "The models this site applies to its data (predictDS), by the SHA-256 of their canonical "
            "bytes, each with a short name and a note ({ name, sha256, note }). A file whose digest "
            "is not listed is refused, whatever it is called."
        ),
    )


def _listed_once(enabled: tuple[str, ...]) -> tuple[str, ...]:
    """A function listed twice is a slip in the file (a merge, a copy): say which, so the board's
    reading of the list is the list the site applies."""
    twice = sorted({name for name in enabled if enabled.count(name) > 1})
    if twice:
        raise ValueError(f"listed more than once: {', '.join(twice)}; list each function once")
    return enabled


# a list of registry functions: each named once
FunctionList = Annotated[tuple[str, ...], AfterValidator(_listed_once)]


class Functions(_RulesSection):
    enabled: Annotated[FunctionList, FIXED] = Field(
        description=(
            "The registry functions this site allows. Anything not listed is refused. "
            "Each function applies its own disclosure checks on top of the rules above."
        ),
    )
    datashield_protocol: Annotated[bool, FIXED] = Field(
        description=(
            "Whether the site answers the Opal DataSHIELD protocol (the /ws routes) for existing "
            "DataSHIELD clients. Both doors share the registry, the rules, the release history and "
            "the budget; what only the DataSHIELD door needs (analyst coefficients in glmDS2, "
            "per-site releases without the pooled protocols) is listed in docs/governance.md. "
            "false: /ws refuses every request; the native API (/v1) stays."
        ),
    )



class Rules(_Section):
    """A validated rules file."""

    disclosure: Disclosure = Field(
        description=(
            "Minimum counts and limits every released number must meet: what makes a result "
            "too small to release."
        ),
    )
    bins: Bins = Field(description="What happens to histogram bins that hold too few records.")
    strings: Strings = Field(description="Limits on the text an analyst may send in a call.")
    parser: Parser = Field(description="Limits on how complicated one call may be.")
    privacy: Privacy = Field(
        description=(
            "Differential privacy: the noise added before record-level values (prediction scores) "
            "leave the site."
        ),
    )
    budget: Budget = Field(description="How much privacy loss may be spent on each table at this site, by all "
                                       "analysts together and by one.")
    secure_aggregation: SecureAggregation = Field(
        description="Sums over sites in which the analyst never sees one site's contribution.",
    )
    models: Models = Field(description="Which prediction models the site applies to its data (predictDS).")
    functions: Functions = Field(description="Which functions an analyst may call at this site.")

    @property
    def noise_off(self) -> bool:
        return self.privacy.mechanism == "none"


def rule_fields() -> dict[str, FieldInfo]:
    """Every key of the rules file as it spells it (``"disclosure.q_threshold"``), with its declaration."""
    return {f"{section}.{key}": info for section, model in Rules.model_fields.items()
            for key, info in model.annotation.model_fields.items()}  # type: ignore[union-attr]


def rule_keys() -> tuple[str, ...]:
    """Every rule's key as the rules file spells it and refusals name it (``"disclosure.q_threshold"``):
    the one vocabulary of refusals, declared checks and the rules a call applied."""
    return tuple(rule_fields())


# --- profiles ------------------------------------------------------------------------

DEFAULT_PROFILE = "default"
_PROFILE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def _overrides(model: type[_RulesSection]) -> type[_Section]:
    """The keys of ``model`` a profile may tighten, each optional, with the same constraints and descriptions."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if stricter(info) == FIXED:
            continue
        annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        fields[name] = (annotation | None, Field(None, description=info.description))
    return create_model(f"{model.__name__}Overrides", __base__=_Section, **fields)


DisclosureOverrides = _overrides(Disclosure)
BinsOverrides = _overrides(Bins)


class Profile(_Section):
    """A named profile: the functions it enables and the rules it tightens."""

    enabled: FunctionList = Field(
        description="The registry functions a session opened with this profile may call.",
    )
    disclosure: DisclosureOverrides = Field(  # type: ignore[valid-type]
        default_factory=DisclosureOverrides,
        description="[disclosure] keys this profile makes stricter (the others are the site's).",
    )
    bins: BinsOverrides = Field(  # type: ignore[valid-type]
        default_factory=BinsOverrides,
        description="[bins] keys this profile makes stricter (the others are the site's).",
    )


# the sections whose keys a profile may tighten ([profiles.NAME.SECTION])
TIGHTENED_SECTIONS = tuple(name for name in Profile.model_fields if name != "enabled")


class RulesFile(Rules):
    """A whole rules file: the site's (default profile's) rules plus optional named profiles."""

    profiles: dict[str, Profile] = Field(
        default_factory=dict,
        description="Named profiles (Opal's DataSHIELD profiles); the default profile is the top level.",
    )

    def profile(self, name: str) -> Rules:
        """The effective rules of profile ``name`` (``"default"``: the file's top-level rules)."""
        base = Rules.model_validate(self.model_dump(exclude={"profiles"}))
        if name == DEFAULT_PROFILE:
            return base
        profile = self.profiles[name]
        tightened = {section: getattr(base, section).model_copy(update={
            k: v for k, v in getattr(profile, section).model_dump().items() if v is not None})
            for section in TIGHTENED_SECTIONS}
        return base.model_copy(update={
            **tightened, "functions": base.functions.model_copy(update={"enabled": profile.enabled})})

    @property
    def profile_names(self) -> list[str]:
        return [DEFAULT_PROFILE, *self.profiles]


def check_profiles(rules: RulesFile, path: Path) -> None:
    """Profile names are valid and not ``default``; no profile loosens a site rule (each key's
    direction is the one its section declares)."""
    text = path.read_text(encoding="utf-8")
    for name, profile in rules.profiles.items():
        if name == DEFAULT_PROFILE or not _PROFILE_NAME.match(name):
            why = ("is reserved: the default profile is the file's top-level rules" if name == DEFAULT_PROFILE
                   else "is not a valid profile name (letters, digits, '_', '.', '-', starting with a letter)")
            raise ConfigFileError(f"{path}:{locate(text, ('profiles', name))}: profile {name!r} {why}")
        for section in TIGHTENED_SECTIONS:
            declared = getattr(rules, section)
            for key, value in getattr(profile, section).model_dump().items():
                site = getattr(declared, key)
                if value is not None and stricter(type(declared).model_fields[key]).looser(site, value):
                    line = locate(text, ("profiles", name, section, key))
                    raise ConfigFileError(
                        f"{path}:{line}: profiles.{name}.{section}.{key} = {value!r} is less strict than the "
                        f"site's {section}.{key} = {site!r}; a profile may only tighten the site's rules"
                    )


def load_rules(path: str | Path) -> RulesFile:
    """Read and validate a rules file; raise ``ConfigFileError`` with file:line:reason."""
    rules = load_toml_model(path, RulesFile)
    check_profiles(rules, Path(path))
    return rules
