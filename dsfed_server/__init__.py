"""dsfed site server: keeps a site's data, runs allowlisted functions under the site's disclosure rules."""

import importlib.util

if importlib.util.find_spec("fastapi") is None:
    raise ImportError("the dsfed site server and its tooling need the server extra: pip install 'dsfed[server]' "
                      "(the analyst client alone is pip install dsfed)")

__version__ = "0.1.0"
