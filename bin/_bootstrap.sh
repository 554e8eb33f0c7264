# Sourced by bin/harness and bin/test: make sure .venv exists and matches pyproject.toml.
# Re-installs only when pyproject.toml changed, so repeated runs start instantly.
# ANIMA_VENV puts the venv elsewhere (a CI runner keeps it outside the checkout, one per pyproject.toml
# hash, so it survives the checkout being wiped); ANIMA_EXTRAS picks the extras (board: test,board);
# ANIMA_PYTHON the interpreter it is made with (a board whose python3 is 3.13, for which
# rknn-toolkit-lite2 has no wheel, names a 3.11 or 3.12 one).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ANIMA_VENV:-$ROOT/.venv}"
EXTRAS="${ANIMA_EXTRAS:-test}"
STAMP="$VENV/.pyproject.sha256"
want="$( (cat "$ROOT/pyproject.toml"; echo "$EXTRAS $ROOT") | sha256sum | cut -d' ' -f1)"
if [[ ! -x "$VENV/bin/python" || "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
    echo "[setup] installing the suite into $VENV (first run or pyproject.toml changed)" >&2
    "${ANIMA_PYTHON:-python3}" -m venv "$VENV"
    # pip's notes about unused local index folders are noise; its real errors still show.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    # PYTHONWARNINGS reaches the build backend too: its editable-install banner is not for users.
    PYTHONWARNINGS=ignore "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$EXTRAS]" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    echo "$want" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
