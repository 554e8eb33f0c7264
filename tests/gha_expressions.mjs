// node tests/gha_expressions.mjs < {"context": {...}, "items": [{"template": T} | {"expression": E} | {"value": E}, ...]}
// Evaluates GitHub Actions expressions with @actions/expressions (GitHub's own parser and evaluator of the
// language, package.json) against the context given as JSON (an item's own "context" replaces it for that
// item), and prints one JSON array of the values: a template's `${{ }}` parts evaluated and substituted as
// strings, as the runner does in a workflow's strings (a concurrency group, an env value); an expression
// (a step's `if:`) as its truthiness; a value (fromJSON(...) of a matrix) as JSON.
import { Evaluator, Lexer, Parser, data } from "@actions/expressions";
import { truthy } from "@actions/expressions/result";
import { readFileSync } from "node:fs";

const input = JSON.parse(readFileSync(0, "utf8"));

function evaluate(text, plain) {
  const context = JSON.parse(JSON.stringify(plain), data.reviver);
  const lexed = new Lexer(text).lex();
  return new Evaluator(new Parser(lexed.tokens, Object.keys(plain), []).parse(), context).evaluate();
}

const values = input.items.map((item) => {
  const plain = item.context ?? input.context;
  if ("expression" in item) return truthy(evaluate(item.expression, plain));
  if ("value" in item) return JSON.parse(JSON.stringify(evaluate(item.value, plain), data.replacer));
  return item.template.replace(/\$\{\{(.*?)\}\}/gs, (_, expr) => evaluate(expr, plain).coerceString());
});
process.stdout.write(JSON.stringify(values) + "\n");
