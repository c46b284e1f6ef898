#!/usr/bin/env bash
# Debian's headless-capable Chromium for the report's browser test (tests/test_report.py).
# Nothing is installed when it is there already.
exec "$(dirname "$0")/apt-install.sh" "report browser test" chromium fonts-dejavu-core
