"""The checkout is lint-clean and type-clean: ruff (pyproject.toml's [tool.ruff]) over the package, the tests,
the tools and the CI scripts, mypy ([tool.mypy]) over harness/, and no private name imported from another module.

Both tools run as subprocesses on the checkout, as a developer runs them (`ruff check harness tests tools
.ci/*.py`, `mypy`); a finding fails the test with the tool's own lines. Both keep their caches outside the
checkout (~/.cache/anima-npu/, set in pyproject.toml), so a repeat run only re-reads what changed.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from harness.model.config import REPO_ROOT
from tests.helpers import missing_tool

RUFF_PATHS = ["harness", "tests", "tools", *sorted(str(p.relative_to(REPO_ROOT)) for p in REPO_ROOT.glob(".ci/*.py"))]
PRIVATE_SCOPE = ["harness", "tests"]


def tool(name: str) -> str:
    """The tool's executable beside this interpreter (the suite's venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        missing_tool(f"{name} is not installed (pyproject.toml's dev extra installs it, within the test extra)")
    return found


def ruff(*args: str, cwd: Path = REPO_ROOT, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([tool("ruff"), "check", "--output-format", "concise", *args],
                          cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing():
    done = ruff(*RUFF_PATHS)
    assert done.returncode == 0, f"ruff check {' '.join(RUFF_PATHS)}:\n{done.stdout}{done.stderr}"


def test_ruff_reports_an_unused_import_added_on_purpose():
    # A copy of a real module with one import too many, linted under the checkout's own configuration.
    module = REPO_ROOT / "harness" / "core" / "atomic.py"
    source = module.read_text().replace("from __future__ import annotations\n",
                                        "from __future__ import annotations\n\nimport fractions\n", 1)
    done = ruff("--stdin-filename", str(module), "-", stdin=source)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "F401" in done.stdout and "`fractions` imported but unused" in done.stdout, done.stdout


def branchy(name: str, branches: int) -> str:
    """A function of complexity 1 + branches (one `if` each)."""
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(branches))
    return f"\n\ndef {name}(x):\n{body}    return -1\n"


def taking(name: str, count: int) -> str:
    return f"\n\ndef {name}({', '.join(f'a{i}' for i in range(count))}):\n    return a0\n"


def configured_limits() -> tuple[int, int]:
    """pyproject.toml's complexity and parameter limits, as ruff reads them."""
    lint = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    return lint["mccabe"]["max-complexity"], lint["pylint"]["max-args"]


def test_the_package_keeps_to_the_complexity_and_parameter_limits():
    # A real module of the package with functions at the configured limits and one past each, linted
    # under the checkout's own configuration: only the two past them are reported.
    complexity, args = configured_limits()
    module = REPO_ROOT / "harness" / "core" / "atomic.py"
    source = module.read_text() + branchy("at_limit", complexity - 1) + branchy("past_limit", complexity) \
        + taking("at_args", args) + taking("past_args", args + 1)
    done = ruff("--stdin-filename", str(module), "-", stdin=source)
    assert done.returncode == 1, done.stdout + done.stderr
    found = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if ": C901" in line or ": PLR0913" in line]
    assert found == [f"C901 `past_limit` is too complex ({complexity + 1} > {complexity})",
                     f"PLR0913 Too many arguments in function definition ({args + 1} > {args})"], done.stdout


def test_mypy_finds_nothing():
    done = subprocess.run([tool("mypy")], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mypy (pyproject.toml [tool.mypy]):\n{done.stdout}{done.stderr}"


def private_imports(path: Path, root: Path = REPO_ROOT) -> list[str]:
    """'file:line: module._name' for every `from module import _name` in a file, wherever it sits (dunders
    are public)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            found += [f"{path.relative_to(root)}:{node.lineno}: {module}.{alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_private_name_is_imported_from_another_module():
    # ruff's own rule (PLC2701, a preview rule) leaves imports inside one package alone; this check does not.
    found = [line for part in PRIVATE_SCOPE for path in sorted((REPO_ROOT / part).rglob("*.py"))
             for line in private_imports(path)]
    assert found == [], "private names imported from another module (make a shared name public):\n" + "\n".join(found)


def test_a_private_import_is_found_even_inside_a_function(tmp_path):
    module = tmp_path / "user.py"
    module.write_text("from .graph import Graph, _rope\n\n\ndef f():\n    from harness.x import _y, __version__\n")
    assert private_imports(module, tmp_path) == ["user.py:1: .graph._rope", "user.py:5: harness.x._y"]
