#!/usr/bin/env bash
# PostgreSQL from Debian's packages, for the tests of the postgresql engine (tests/pgkit.py starts a
# throwaway cluster with its binaries; no cluster of the package's own is used). Nothing is installed
# when it is there already.
exec "$(dirname "$0")/apt-install.sh" "PostgreSQL engine tests" postgresql
