# Sourced by bin/harness and bin/test: make sure .venv exists and matches pyproject.toml.
# Re-installs only when pyproject.toml changed, so repeated runs start instantly.
# ANIMA_VENV puts the venv elsewhere (a CI runner keeps it outside the checkout, one per set of
# requirements, so it survives the checkout being wiped); ANIMA_EXTRAS picks the extras (default: `board`
# on an RK3588, `test` elsewhere); ANIMA_PYTHON the interpreter it is made with (3.11 or newer; a board
# needs 3.11 or 3.12, rknn-toolkit-lite2's wheels). ANIMA_SETUP=dry-run prints what would be installed
# and installs nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ANIMA_VENV:-$ROOT/.venv}"
PYTHON="${ANIMA_PYTHON:-python3}"
# An RK3588 is told by its device tree, read under ANIMA_TELEMETRY_ROOT when set (a board-shaped tree,
# as tests and an emulated board give one; it is also --telemetry-root's default). A board installs its
# own set: the board extra (the suite's tiers and rknn-toolkit-lite2), no developer tool, no toolkit
# environment, only the Debian packages its tiers use.
if [[ -n "${ANIMA_TELEMETRY_ROOT:-}" ]]; then
    ANIMA_TELEMETRY_ROOT="$(realpath -m "$ANIMA_TELEMETRY_ROOT")" && export ANIMA_TELEMETRY_ROOT
fi
ROLE=host
grep -qs "rockchip,rk3588" "${ANIMA_TELEMETRY_ROOT:-}/proc/device-tree/compatible" && ROLE=board
EXTRAS="${ANIMA_EXTRAS:-$([[ $ROLE == board ]] && echo board || echo test)}"
DRY_RUN=""
[[ "${ANIMA_SETUP:-}" == dry-run ]] && DRY_RUN=1
STAMP="$VENV/.requirements.sha256"
# The venv is keyed by what it installs (the requirement lines and the interpreter), not by the
# checkout's path: a board runner's venv survives each job's fresh checkout.
# One interpreter start gives both (the lines, then `python --version`'s line), without site's imports (-S):
# this runs before every command, and `bin/harness --help` was mostly these starts.
keyed="$("$PYTHON" -S "$ROOT/bin/_requirements.py" "$ROOT/pyproject.toml" "$EXTRAS" $ROLE --key)"
requirements="${keyed%$'\n'*}"
want="$(echo "$keyed" | sha256sum)" && want="${want%% *}"
if [[ -n "$DRY_RUN" ]]; then
    echo "[setup] dry run: $ROLE$([[ $ROLE == board ]] && echo " (rockchip,rk3588 in ${ANIMA_TELEMETRY_ROOT:-}/proc/device-tree/compatible)")"
    echo "[setup] venv $VENV ($("$PYTHON" --version), extras $EXTRAS): $([[ -x "$VENV/bin/python" && "$(cat "$STAMP" 2>/dev/null)" == "$want" ]] && echo "up to date" || echo "would install")"
    echo "$requirements" | sed 's/^/[setup] requirement: /'
elif [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
    echo "[setup] installing the suite's dependencies into $VENV (first run or pyproject.toml changed)" >&2
    "$PYTHON" -m venv "$VENV"
    # pip's notes about unused local index folders are noise; its real errors still show.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    # PYTHONWARNINGS reaches the build backends too: their banners are not for users.
    # A venv made before the suite stopped installing itself: drop that editable install.
    "$VENV/bin/python" -m pip uninstall --quiet --yes anima-npu-acceptance > /dev/null 2>&1 || true
    # A line per package pip collects, then one for the install: a first run is minutes of downloads,
    # never a silence (pip's own bars are for a terminal, and a CI log gets thousands of lines of them).
    echo "$requirements" | PYTHONWARNINGS=ignore "$VENV/bin/python" -m pip install --progress-bar off \
        --disable-pip-version-check -r /dev/stdin 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2) |
        awk '
            /^Collecting / { n++; printf "[setup] package %d: %s\n", n, $2 > "/dev/stderr"; fflush("/dev/stderr") }
            /^Installing collected packages/ { print "[setup] installing what was collected" > "/dev/stderr"; fflush("/dev/stderr") }
            /^Successfully installed/ { printf "[setup] installed %d packages\n", NF - 2 > "/dev/stderr" }'
    echo "$want" > "$STAMP"
fi
# This checkout's harness, for this process and every subprocess it starts (the venv has none).
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
# Bytecode, and pytest's rewritten test modules, cached outside the checkout: also where the
# environment asks for no bytecode in the tree (PYTHONDONTWRITEBYTECODE), which otherwise made every
# run compile harness/ and rewrite every test module again (~5 s of CPU before `-m npu`'s first test).
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-${XDG_CACHE_HOME:-$HOME/.cache}/anima-npu/pycache}"
unset PYTHONDONTWRITEBYTECODE
export PATH="$VENV/bin:$PATH"
# Where the user stands: path options are read from there (harness/cli/usage.py), not from the checkout.
export ANIMA_CWD="$PWD"
cd "$ROOT"
