"""The function set. Importing this package registers every entry in the registry."""

from dsfed_server.functions import contingency, glm, histogram, quantiles, summaries, tables  # noqa: F401
