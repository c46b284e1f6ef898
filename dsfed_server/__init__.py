"""dsfed site server: keeps a site's data, runs allowlisted functions under the site's disclosure rules."""

__version__ = "0.1.0"
