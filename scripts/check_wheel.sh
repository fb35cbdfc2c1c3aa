#!/usr/bin/env bash
# Test the built wheel where the editable install cannot look.
#
# The editable install of .ci/run imports the package from the checkout. This script instead:
#   1. builds the wheel from the checkout and installs it into a fresh venv on the newest Python
#      found (python3.13, python3.12, else python3), with every direct dependency at the lowest
#      version pyproject.toml allows (a floor that no longer works fails here, not in a user's
#      build);
#   2. runs the suite from a copy of the tree *without* engram_memory/, so every import resolves to
#      the installed wheel (a module left out of the wheel fails here);
#   3. first without the mcp extra: the core and the CLI import, the MCP adapter's import says
#      how to install the extra, and the adapter's tests skip;
#   4. then, with the extra, the whole suite.
#
# Usage: bash scripts/check_wheel.sh   (needs git, bash and python3 >= 3.11 with venv and pip)
set -euo pipefail

repo="$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
work="$(mktemp -d "${TMPDIR:-/tmp}/engram-wheel.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
unset VIRTUAL_ENV PYTHONPATH PYTHONHOME PYTHONSTARTUP || true

newest_python() {
    # pyenv shims answer only for the selected versions: offer them every installed one.
    if command -v pyenv >/dev/null 2>&1; then
        PYENV_VERSION="$(pyenv versions --bare 2>/dev/null | paste -sd: -)"
        export PYENV_VERSION
    fi
    for candidate in python3.13 python3.12 python3; do
        # the interpreter itself, not a shim: the shim answers only under this PYENV_VERSION
        if "$candidate" -c 'import sys, venv; assert sys.version_info >= (3, 11); print(sys.executable)' 2>/dev/null; then
            return
        fi
    done
    echo "wheel: no python3 >= 3.11 found" >&2
    return 1
}

python="$(newest_python)"
"$python" -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
echo "wheel: $(python --version)"
python -m pip install --quiet --upgrade pip

# The lowest versions pyproject.toml allows for each direct dependency ("name>=X" -> "name==X").
python - "$repo/pyproject.toml" >"$work/lowest.txt" <<'EOF'
import re, sys, tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project["optional-dependencies"]
for requirement in project["dependencies"] + extras["testing"] + extras["mcp"]:
    floor = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)\s*(,.*)?", requirement)
    if floor is None:
        sys.exit(f"wheel: no floor in {requirement!r}")
    print(f"{floor[1]}=={floor[2]}")
EOF
echo "wheel: lowest direct dependencies: $(paste -sd' ' "$work/lowest.txt")"

python -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$repo"
wheel=("$work"/dist/*.whl)
echo "wheel: built $(basename "${wheel[0]}")"
python -m pip install --quiet --constraint "$work/lowest.txt" "${wheel[0]}[testing]" jsonschema

# The tree without the package, so that nothing imports the checkout.
mkdir "$work/tree"
git -C "$repo" ls-files -z | grep -zv '^engram_memory/' | (cd "$repo" && xargs -0 tar -cf -) | tar -xf - -C "$work/tree"
cd "$work/tree"

echo "wheel: without the mcp extra"
python - <<'EOF'
import sys

import engram_memory, engram_memory.cli, engram_memory.testing  # noqa: F401

assert "site-packages" in engram_memory.__file__, engram_memory.__file__
assert "mcp" not in sys.modules and "anyio" not in sys.modules, "the core imported the MCP SDK"
try:
    import engram_memory.adapters.mcp  # noqa: F401
except ModuleNotFoundError as error:
    assert 'pip install ".[mcp]"' in str(error), error
else:
    sys.exit("wheel: the MCP adapter imported without its extra")
EOF
python -m pytest -q -p no:cacheprovider tests/test_adapter_mcp.py tests/test_mcp_stdio.py tests/test_newuser_edges.py \
    tests/test_cli_failures.py tests/test_architecture.py

echo "wheel: with the mcp extra, the whole suite"
python -m pip install --quiet --constraint "$work/lowest.txt" "${wheel[0]}[mcp]"
python -m pytest -q -p no:cacheprovider
