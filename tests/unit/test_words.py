"""One word per thing: the README's words table is the declaration, and its "never" column's spellings
(`fp16`, `--dtype`, `changepoint`, ...) appear nowhere in what the suite says. What the suite says is its
prose: every Markdown page, the comments and the sentences (string literals with a space) of its Python,
the comments of its TOML. Identifiers are not prose (a CSS class is `change-point`, as its language
spells names); tests are not scanned, since a test may name a retired word to prove it is refused; nor
is a line that calls a spelling deprecated (the options table names an option's old spelling, which
still works).

"baseline" is the results store's accepted reference only: its retired meanings (a side of an A/B
session, which is A or B; the memory guard's first reading, its start; the fixed rule's threshold,
`--fixed-threshold`) are spellings of the table's "never" column like any other."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("harness", "tools", "docs", "boards", "toolkit", "models", "golden", "bin", ".ci")
# Retired spellings still in files other engineers are changing now (issue 46: the verdict package,
# the simulation, the backends), each to go when its file is next edited; the test below fails once
# one is gone, so that its exemption goes too.
PENDING: set[tuple[str, str]] = set()


def words_table(readme: Path) -> str:
    """The README's '## Words' section."""
    text = readme.read_text()
    start = text.index("\n## Words")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def retired(readme: Path = REPO_ROOT / "README.md") -> list[str]:
    """The backticked spellings of the words table's last ("never") column."""
    rows = [line for line in words_table(readme).splitlines() if line.startswith("| **")]
    return [term for row in rows for term in re.findall(r"`([^`]+)`", row.split("|")[-2])]


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of what a file says in words."""
    text = path.read_text(errors="replace")
    if path.suffix == ".md":          # a words table names the retired spellings: its lines are left out
        table = words_table(path).splitlines() if "\n## Words" in text else []
        return [(n, line) for n, line in enumerate(text.splitlines(), 1) if line not in table and not _deprecated(line)]
    if path.suffix == ".toml":
        return [(n, line.split("#", 1)[1]) for n, line in enumerate(text.splitlines(), 1)
                if "#" in line and not _deprecated(line)]
    if path.suffix == ".py":
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return [(t.start[0], t.string) for t in tokens
                if (t.type == tokenize.COMMENT or (t.type == tokenize.STRING and re.search(r"\s", t.string)))
                and not _deprecated(t.string)]
    return []


def _deprecated(line: str) -> bool:
    """A line naming an old spelling as deprecated (it still works, and says the new one)."""
    return "deprecated" in line


def uses(paths, terms) -> list[str]:
    """'file:line: term' for every retired spelling in the prose of `paths`."""
    patterns = {term: re.compile(rf"(?<![\w-])({re.escape(term)}|{re.escape(term.capitalize())})s?(?![\w-])")
                for term in terms}      # as written, or opening a sentence (FP16 is a word; fp16 was a value)
    # Only a file that has a spelling anywhere is read for its prose (tokenizing every module took 1 s).
    candidates = [path for path in paths if any(p.search(path.read_text(errors="replace")) for p in patterns.values())]
    return [f"{path}:{n}: {term}" for path in candidates for n, line in prose(path)
            for term, pattern in patterns.items() if pattern.search(line)]


def scanned_files() -> list[Path]:
    files = [REPO_ROOT / "README.md", REPO_ROOT / "pyproject.toml"]
    for top in SCANNED:
        files += sorted(p for p in (REPO_ROOT / top).rglob("*") if p.suffix in (".md", ".py", ".toml"))
    return files


def test_the_words_table_retires_the_known_spellings():
    assert {"fp16", "--dtype", "ffn-w8a8", "changepoint", "change-point"} <= set(retired())
    # "baseline" in the meanings it no longer has: an A/B side, the guard's first reading, the fixed rule
    assert {"bench-ab --baseline", "--ab-baseline", "baseline side", "baseline partition", "baseline and candidate",
            "baseline and the candidate", "baseline and a candidate", "baseline runs first", "memory baseline",
            "baseline reading", "--baseline-threshold"} <= set(retired())


def _where(found: str) -> tuple[str, str]:
    """(file relative to the checkout, spelling) of a 'file:line: spelling' that `uses` found."""
    head, term = found.split(": ", 1)
    return str(Path(head.rpartition(":")[0]).relative_to(REPO_ROOT)), term


def test_no_retired_spelling_in_the_suites_prose():
    found = [f for f in uses(scanned_files(), retired()) if _where(f) not in PENDING]
    assert found == [], "retired spellings (README.md's words table says the word):\n" + "\n".join(found)


def test_each_pending_spelling_is_still_there():
    found = {_where(f) for f in uses([REPO_ROOT / path for path, _ in PENDING], retired())}
    assert PENDING <= found, f"gone from its file, so drop it from PENDING: {sorted(PENDING - found)}"


def test_a_retired_spelling_is_found_in_a_page_a_comment_and_a_message_not_in_a_name(tmp_path):
    page, code, config = tmp_path / "page.md", tmp_path / "code.py", tmp_path / "board.toml"
    page.write_text("# Title\nThe Change-point search.\n")
    code.write_text('CLASS = "change-point"  # a changepoint here\nraise ValueError("two change-points found")\n')
    config.write_text('mark = "change-point"\n# --dtype float16 is gone\n')
    found = uses([page, code, config], ["changepoint", "change-point", "--dtype"])
    assert found == [f"{page}:2: change-point", f"{code}:1: changepoint", f"{code}:2: change-point",
                     f"{config}:2: --dtype"]
