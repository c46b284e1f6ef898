"""The schema of a site's rules file (``disclosure_rules/*.toml``).

Every key is required: the file a governance board signs off is the whole
truth, and the code holds no hidden defaults. ``default.toml`` ships the
conservative values. Each field's description says, in plain words, what the
key protects against; ``dsfed rules explain`` prints them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dsfed_server.tomlfile import load_toml_model


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Disclosure(_Section):
    q_threshold: int = Field(
        ge=1,
        le=1000,
        description=(
            "Minimum number of records behind any aggregate, and minimum count of every "
            "non-zero cell of a table (DataSHIELD nfilter.tab; seed-000 paper uses 5). "
            "Protects against singling out a person from a small count or mean."
        ),
    )
    subset_min: int = Field(
        ge=1,
        le=1000,
        description=(
            "Minimum number of rows in a subset created on the site, and in the rows it leaves "
            "out (DataSHIELD nfilter.subset). Protects against differencing a small subset "
            "against its complement."
        ),
    )
    glm_saturation: float = Field(
        gt=0,
        le=1,
        description=(
            "A model may have at most this fraction of the records as parameters "
            "(DataSHIELD nfilter.glm). Protects against saturated models whose fit "
            "reproduces individual outcomes."
        ),
    )
    max_factor_levels: int = Field(
        ge=2,
        le=10000,
        description=(
            "Most levels a factor may have to be tabulated or used in a model "
            "(DataSHIELD nfilter.levels.max). Protects against near-unique categories."
        ),
    )
    factor_levels_density: float = Field(
        gt=0,
        le=1,
        description=(
            "A factor may have at most this fraction of the records as levels "
            "(DataSHIELD nfilter.levels.density). Protects against categories that "
            "identify single records."
        ),
    )


class Bins(_Section):
    small_bin_policy: Literal["refuse", "merge"] = Field(
        description=(
            "What a histogram does with a bin holding 0 < n < q_threshold records: 'refuse' "
            "refuses the whole histogram; 'merge' joins the small bin with a neighbour until "
            "every non-empty bin reaches q_threshold. Protects against locating single records."
        ),
    )


class Strings(_Section):
    max_length: int = Field(
        ge=1,
        le=10000,
        description=(
            "Longest string argument (or call text) accepted (DataSHIELD nfilter.string). "
            "Protects against code smuggled inside long arguments."
        ),
    )
    max_name_length: int = Field(
        ge=1,
        le=1000,
        description=(
            "Longest symbol, column or table name accepted (DataSHIELD nfilter.stringShort)."
        ),
    )


class Parser(_Section):
    max_depth: int = Field(
        ge=1,
        le=50,
        description=(
            "Deepest nesting of calls and vectors accepted in one call. Protects the parser "
            "against resource exhaustion by deeply nested expressions."
        ),
    )


class Privacy(_Section):
    mechanism: Literal["analytic_gaussian", "none"] = Field(
        description=(
            "Noise added to record-level values released under differential privacy: "
            "'analytic_gaussian' (Balle & Wang 2018); 'none' only for test profiles, and "
            "then no_noise_acknowledged must say why."
        ),
    )
    epsilon: float = Field(
        gt=0,
        le=100,
        description="Privacy loss epsilon charged per noisy query. Smaller is more private.",
    )
    delta: float = Field(
        gt=0,
        lt=1,
        description="Probability delta that the epsilon guarantee fails, per noisy query.",
    )
    score_l2_sensitivity: float = Field(
        gt=0,
        description=(
            "l2-sensitivity of prediction scores that this site asserts; the noise scale is "
            "computed from it. A client can never lower it."
        ),
    )
    no_noise_acknowledged: str = Field(
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


class Budget(_Section):
    epsilon_per_analyst: float = Field(
        gt=0,
        description="Total epsilon one analyst may spend on one table at this site.",
    )
    delta_per_analyst: float = Field(
        gt=0,
        lt=1,
        description="Total delta one analyst may spend on one table at this site.",
    )


class Functions(_Section):
    enabled: tuple[str, ...] = Field(
        description=(
            "The registry functions this site allows. Anything not listed is refused. "
            "Each function applies its own disclosure checks on top of the rules above."
        ),
    )


class Rules(_Section):
    """A validated rules file."""

    disclosure: Disclosure
    bins: Bins
    strings: Strings
    parser: Parser
    privacy: Privacy
    budget: Budget
    functions: Functions

    @property
    def noise_off(self) -> bool:
        return self.privacy.mechanism == "none"


def load_rules(path: str | Path) -> Rules:
    """Read and validate a rules file; raise ``ConfigFileError`` with file:line:reason."""
    return load_toml_model(path, Rules)
