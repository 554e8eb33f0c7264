# Sourced by bin/test after bin/_bootstrap.sh (which tells the ROLE): install the missing Debian packages
# of the role's lists. A board's tiers use bin/debian-packages-board.txt only; a CI host (a PC) runs every
# test and installs both lists. As root it installs them; otherwise it names them and goes on, and the
# tests that need them fail under CI=true and skip elsewhere, each naming the missing tool.
_lists=("$ROOT/bin/debian-packages-board.txt")
[[ $ROLE == host ]] && _lists+=("$ROOT/bin/debian-packages.txt")
_wanted=() _missing=()
while read -r _pkg; do
    [[ -z "$_pkg" || "$_pkg" == \#* ]] && continue
    _wanted+=("$_pkg")
    dpkg-query -W -f='${Status}' "$_pkg" 2>/dev/null | grep -q "install ok installed" || _missing+=("$_pkg")
done < <(cat "${_lists[@]}")
if [[ -n "$DRY_RUN" ]]; then
    echo "[setup] Debian packages: ${_wanted[*]} (missing here: ${_missing[*]:-none})"
elif (( ${#_missing[@]} )); then
    if [[ $(id -u) == 0 ]] && command -v apt-get > /dev/null; then
        echo "[setup] installing Debian packages: ${_missing[*]}" >&2
        apt-get update -qq > /dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${_missing[@]}" > /dev/null
    else
        echo "[setup] missing Debian packages (install them as root): ${_missing[*]}" >&2
    fi
fi
unset _lists _wanted _missing _pkg
