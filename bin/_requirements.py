"""Print the requirements bin/_bootstrap.sh installs: pyproject.toml's dependencies plus the named extras.

The venv holds the suite's dependencies only, never the suite itself: the checkout is put on
PYTHONPATH instead, so one venv (ANIMA_VENV, keyed by these lines) serves every checkout of the same
pyproject.toml, and no checkout ever imports another's code through an editable install.
"""
import sys
import tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = [name for name in sys.argv[2].split(",") if name]
lines = list(project["dependencies"])
for name in extras:
    lines += project["optional-dependencies"][name]
print("\n".join(lines))
