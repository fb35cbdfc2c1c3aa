#!/usr/bin/env bash
# Run the README's Quickstart commands exactly as written, each in a fresh clone of HEAD.
#
# The two ```sh blocks of the "## Quickstart" section of README.md (as committed at HEAD) are
# extracted verbatim and run with bash, each in its own fresh `git clone` of this repository at HEAD
# (so each builds its own .venv from scratch, as a newcomer would). Uncommitted changes are not
# part of HEAD and are therefore not checked. The script fails if the section does not hold exactly
# two commands or if either command fails; the failing command's output is printed then. Each
# command's output goes to a log; QUICKSTART_VERBOSE=1 streams it instead. Temporary directories are
# removed on exit, whatever happens.
#
# Usage: bash scripts/check_quickstart.sh   (needs git, bash and python3 >= 3.11 with venv and pip)
set -euo pipefail

repo="$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
head="$(git -C "$repo" rev-parse HEAD)"
work="$(mktemp -d "${TMPDIR:-/tmp}/engram-quickstart.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A newcomer's shell: no activated virtual environment, no inherited Python path.
unset VIRTUAL_ENV PYTHONPATH PYTHONHOME PYTHONSTARTUP || true

fresh_clone() {
    git clone --quiet --no-hardlinks "$repo" "$1"
    git -C "$1" -c advice.detachedHead=false checkout --quiet --detach "$head"
}

echo "quickstart: checking README.md at ${head:0:12}"
fresh_clone "$work/readme"
# The ```sh blocks of the "## Quickstart" section, one file per block, byte for byte.
awk -v out="$work/command" '
    /^## / { section = ($0 == "## Quickstart") }
    section && !block && /^```sh[[:space:]]*$/ { block = 1; count++; printf "" > (out "-" count ".sh"); next }
    block && /^```[[:space:]]*$/ { block = 0; next }
    block { print > (out "-" count ".sh") }
' "$work/readme/README.md"

commands=("$work"/command-*.sh)
if [[ ! -e "${commands[0]}" || ${#commands[@]} -ne 2 ]]; then
    echo "quickstart: expected exactly two \`\`\`sh blocks in the Quickstart section of README.md" >&2
    exit 1
fi

status=0
for index in 1 2; do
    command_file="$work/command-$index.sh"
    clone="$work/clone-$index"
    log="$work/command-$index.log"
    fresh_clone "$clone"
    echo "quickstart: command $index: $(cat "$command_file")"
    started=$SECONDS
    if [[ "${QUICKSTART_VERBOSE:-0}" == 1 ]]; then
        (cd "$clone" && bash "$command_file" </dev/null) && result=0 || result=$?
    else
        (cd "$clone" && bash "$command_file" </dev/null >"$log" 2>&1) && result=0 || result=$?
    fi
    elapsed=$((SECONDS - started))
    if [[ $result -eq 0 ]]; then
        echo "quickstart: command $index passed in ${elapsed}s"
    else
        echo "quickstart: command $index FAILED with status $result after ${elapsed}s" >&2
        if [[ -f "$log" ]]; then
            echo "----- output of command $index -----" >&2
            cat "$log" >&2
            echo "----- end of output -----" >&2
        fi
        status=1
    fi
done

if [[ $status -eq 0 ]]; then
    echo "quickstart: both README commands passed"
fi
exit "$status"
