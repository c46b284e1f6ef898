"""The function set. Importing this package registers every entry in the registry."""

from dsfed_server.functions import contingency, glm, histogram, quantiles, summaries, tables, validation  # noqa: F401
from dsfed_server.functions import predict, recalibration  # noqa: F401,E402
from dsfed_server.functions import comparison, curves, deciles, derive, secure  # noqa: F401,E402
from dsfed_server.functions import splines  # noqa: F401,E402

# dsBase-compatible entries, and dsBase's R result shapes for the Opal front door (after the entries they adapt)
from dsfed_server.functions import datamanagement, glm_slma, groups, opal_shapes  # noqa: F401,E402
