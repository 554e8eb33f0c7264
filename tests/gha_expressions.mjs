// node tests/gha_expressions.mjs < {"context": {...}, "items": [{"template": "..."} | {"expression": "..."}]}
// Evaluates GitHub Actions expressions with @actions/expressions (GitHub's own parser and evaluator of the
// language, package.json) against the context given as JSON, and prints one JSON array of the values:
// a template's `${{ }}` parts evaluated and substituted as strings, as the runner does in a workflow's
// strings (a concurrency group, an env value); an expression (a step's `if:`) as its truthiness.
import { Evaluator, Lexer, Parser, data } from "@actions/expressions";
import { truthy } from "@actions/expressions/result";
import { readFileSync } from "node:fs";

const input = JSON.parse(readFileSync(0, "utf8"));
const context = JSON.parse(JSON.stringify(input.context), data.reviver);
const names = Object.keys(input.context);

function evaluate(text) {
  const lexed = new Lexer(text).lex();
  return new Evaluator(new Parser(lexed.tokens, names, []).parse(), context).evaluate();
}

const values = input.items.map((item) => {
  if ("expression" in item) return truthy(evaluate(item.expression));
  return item.template.replace(/\$\{\{(.*?)\}\}/gs, (_, expr) => evaluate(expr).coerceString());
});
process.stdout.write(JSON.stringify(values) + "\n");
