"""The disclosure layer: the site's rules file, the checks it drives, and DP mechanisms."""
