#!/usr/bin/env bash
# Regenerates the locked dependency set from pyproject.toml (the compatible ranges a library user
# installs) into requirements/*.txt (the exact versions and hashes every machine here installs).
#
#   requirements/lock.sh            refresh: keep every current pin that still satisfies
#                                   pyproject.toml, resolve only what changed
#   requirements/lock.sh --upgrade  move every package to the newest version pyproject.toml admits
#   requirements/lock.sh --check    regenerate in a scratch copy and fail if anything would change
#
# main.txt: runtime + build backend (make demo, the Dockerfile); dev.txt: main.txt's exact pins plus
# the test and lint tools (make test, CI). Both are universal (any OS, Python >= 3.11), so a user
# on another Linux or Python resolves to the same versions.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
uv="${UV:-uv}"

compile() {  # run in a folder holding pyproject.toml, README.md and requirements/
  local extra=("$@")
  local common=(pip compile --quiet --universal --python-version 3.11 --generate-hashes
                --custom-compile-command "requirements/lock.sh" "${extra[@]}")
  "$uv" "${common[@]}" pyproject.toml requirements/build.in -o requirements/main.txt
  "$uv" "${common[@]}" pyproject.toml requirements/build.in --extra dev \
        -c requirements/main.txt -o requirements/dev.txt
  "$uv" "${common[@]}" requirements/uv.in -o requirements/uv.txt
}

case "${1:-}" in
  --check)
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    cp "$here/../pyproject.toml" "$here/../README.md" "$scratch/"
    cp -r "$here" "$scratch/requirements"
    (cd "$scratch" && compile)
    if ! diff -ru "$here" "$scratch/requirements" >"$scratch.diff"; then
      cat "$scratch.diff"; rm -f "$scratch.diff"
      echo "the lock is not current with pyproject.toml: run requirements/lock.sh and commit" >&2
      exit 1
    fi
    rm -f "$scratch.diff"
    echo "lock is current: regenerating requirements/*.txt from pyproject.toml changes nothing"
    ;;
  --upgrade) (cd "$here/.." && compile --upgrade) ;;
  "") (cd "$here/.." && compile) ;;
  *) echo "usage: requirements/lock.sh [--check | --upgrade]" >&2; exit 2 ;;
esac
