"""The demo (``dsfed demo``): a federation of GBSG2 sites and an analyst session over it.

It is both a federation (it provisions and starts site servers, :mod:`dsfed_server`) and an
analyst (:mod:`dsfed_client`), so it lives in a package of its own: the client and the server
never import each other, and only this package imports both.
"""
