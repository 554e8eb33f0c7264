# Sourced by bin/test: install the Debian packages in bin/debian-packages.txt that are missing.
# As root (a CI machine, a fresh board runner) it installs them; otherwise it names them and goes on,
# and the tests that need them fail under CI=true and skip elsewhere, each naming the missing tool.
_missing=()
while read -r _pkg; do
    [[ -z "$_pkg" || "$_pkg" == \#* ]] && continue
    dpkg-query -W -f='${Status}' "$_pkg" 2>/dev/null | grep -q "install ok installed" || _missing+=("$_pkg")
done < "$(dirname "${BASH_SOURCE[0]}")/debian-packages.txt"
if (( ${#_missing[@]} )); then
    if [[ $(id -u) == 0 ]] && command -v apt-get > /dev/null; then
        echo "[setup] installing Debian packages: ${_missing[*]}" >&2
        apt-get update -qq > /dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${_missing[@]}" > /dev/null
    else
        echo "[setup] missing Debian packages (install them as root): ${_missing[*]}" >&2
    fi
fi
unset _missing _pkg
