#!/usr/bin/env bash
# Bootstrap everything malhar's tests and samples need on a fresh Debian machine:
# system packages (Java, Maven, PostgreSQL), a virtualenv with the package and
# its test extras, and the official Kafka / Hadoop jars from Maven Central.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  need_apt+=(postgresql)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need_apt[@]}"
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  $PYTHON -m venv .venv
fi
# pip keeps its wheel cache in ~/.cache/pip, so a second machine run downloads nothing.
.venv/bin/python -m pip install -q --upgrade "pip>=24"
.venv/bin/python -m pip install -q -e ".[all]"

# Fetch the official jars now, so that a registry problem shows here and not in a test.
.venv/bin/python -m malhar.testing fetch
touch .venv/.installed
echo "setup: done"
