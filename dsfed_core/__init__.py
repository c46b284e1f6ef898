"""The shared core of dsfed: pure computations that the site server and the analyst client both run.

Nothing here imports the server or the client, does I/O or talks HTTP; the client installs it
without the server, and a site derives from an authenticated pooled result exactly what the
analyst would (the next round's parameters: data-dependent parameters come from the sites).
"""
