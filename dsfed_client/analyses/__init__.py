"""Analyses composed from the sites' aggregate functions."""

from dsfed_client.analyses.glm import GLMResults, ds_glm

__all__ = ["GLMResults", "ds_glm"]
