"""Print the requirements bin/_bootstrap.sh installs: pyproject.toml's dependencies plus the named extras.

    _requirements.py PYPROJECT EXTRAS [board|host] [--key]

With --key the last line is the interpreter's version as `python --version` prints it: the lines then
are what the venv is keyed by, from one interpreter start (bin/_bootstrap.sh runs on every command, and
a second start, through a pyenv shim, was a third of `bin/harness --help`'s CPU).

The venv holds the suite's dependencies only, never the suite itself: the checkout is put on
PYTHONPATH instead, so one venv (ANIMA_VENV, keyed by these lines) serves every checkout of the same
pyproject.toml, and no checkout ever imports another's code through an editable install.

It runs under the interpreter the venv is made with, so it first checks that interpreter; the check comes
before anything a newer Python has (tomllib is 3.11's) and in syntax every Python 3 parses, so a board
image's Python 3.10 (Ubuntu 22.04) gets one line saying what to do, not a traceback.
"""
import re
import sys

MINIMUM = (3, 11)                 # pyproject.toml's requires-python
BOARD_NEWEST = (3, 12)            # rknn-toolkit-lite2's newest aarch64 wheels are cp312
SELF = "anima-npu-acceptance"     # an extra naming the project's own extras: pip's self-reference
HOW = ("install a 3.11 beside it (on Ubuntu 22.04: `sudo apt-get install python3.11 python3.11-venv`), "
       "then `export ANIMA_PYTHON=python3.11` and run the command again (docs/board.md, section 2)")


def python_problem(version, executable, board):
    """One line saying why this interpreter cannot make the suite's venv, or None."""
    found = "Python {}.{}.{} ({})".format(version[0], version[1], version[2], executable)
    if tuple(version[:2]) < MINIMUM:
        return "{} is too old: the suite needs 3.11 or newer; {}".format(found, HOW)
    if board and tuple(version[:2]) > BOARD_NEWEST:
        return ("{} is too new for a board: rknn-toolkit-lite2 has aarch64 wheels up to 3.12; {}"
                .format(found, HOW))
    return None


def requirements(project, extras):
    """The dependencies and the extras' lines, an extra naming the project's own extras expanded."""
    lines, seen, todo = list(project["dependencies"]), set(), list(extras)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        for line in project["optional-dependencies"][name]:
            own = re.fullmatch(re.escape(SELF) + r"\[([\w,\s-]+)\]", line.strip())
            if own:
                todo += [n.strip() for n in own.group(1).split(",")]
            elif line not in lines:
                lines.append(line)
    return lines


def main(argv):
    board = argv[3:4] == ["board"]
    problem = python_problem(sys.version_info, sys.executable, board)
    if problem:
        print("error: " + problem, file=sys.stderr)
        return 2
    import tomllib
    with open(argv[1], "rb") as fh:
        project = tomllib.load(fh)["project"]
    extras = [name for name in argv[2].split(",") if name]
    unknown = [name for name in extras if name not in project["optional-dependencies"]]
    if unknown:
        print("error: ANIMA_EXTRAS names '{}', not an extra of {} (extras: {})".format(
            unknown[0], argv[1], ", ".join(project["optional-dependencies"])), file=sys.stderr)
        return 2
    print("\n".join(requirements(project, extras)))
    if argv[4:] == ["--key"]:
        print("Python " + sys.version.split()[0])       # PY_VERSION, as --version prints it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
