# Sourced by bin/harness and bin/test: make sure .venv exists and matches pyproject.toml.
# Re-installs only when pyproject.toml changed, so repeated runs start instantly.
# ANIMA_VENV puts the venv elsewhere (a CI runner keeps it outside the checkout, one per set of
# requirements, so it survives the checkout being wiped); ANIMA_EXTRAS picks the extras (board: test,board);
# ANIMA_PYTHON the interpreter it is made with (a board whose python3 is 3.13, for which
# rknn-toolkit-lite2 has no wheel, names a 3.11 or 3.12 one).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ANIMA_VENV:-$ROOT/.venv}"
EXTRAS="${ANIMA_EXTRAS:-test}"
STAMP="$VENV/.requirements.sha256"
# The venv is keyed by what it installs (the requirement lines and the interpreter), not by the
# checkout's path: a board runner's venv survives each job's fresh checkout.
requirements="$("${ANIMA_PYTHON:-python3}" "$ROOT/bin/_requirements.py" "$ROOT/pyproject.toml" "$EXTRAS")"
want="$( (echo "$requirements"; "${ANIMA_PYTHON:-python3}" --version) | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
    echo "[setup] installing the suite's dependencies into $VENV (first run or pyproject.toml changed)" >&2
    "${ANIMA_PYTHON:-python3}" -m venv "$VENV"
    # pip's notes about unused local index folders are noise; its real errors still show.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    # PYTHONWARNINGS reaches the build backends too: their banners are not for users.
    # A venv made before the suite stopped installing itself: drop that editable install.
    "$VENV/bin/python" -m pip uninstall --quiet --yes anima-npu-acceptance > /dev/null 2>&1 || true
    echo "$requirements" | PYTHONWARNINGS=ignore "$VENV/bin/python" -m pip install --quiet \
        --disable-pip-version-check -r /dev/stdin 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
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
