"""The Opal-compatible DataSHIELD front door (``/ws``): unmodified DataSHIELD clients
(PyPI ``datashield`` + ``datashield-opal``) talk to a dsfed site as to an Opal server.

The routes (:mod:`dsfed_server.opal.routes`) translate the Opal protocol to the
:class:`~dsfed_server.service.SiteService` calls the native ``/v1`` API makes;
:mod:`~dsfed_server.opal.commands` keeps asynchronous commands for polling and
:mod:`~dsfed_server.opal.dto` builds Opal's JSON documents.
"""

from dsfed_server.opal.routes import opal_router

__all__ = ["opal_router"]
