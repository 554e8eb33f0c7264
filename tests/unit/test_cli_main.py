"""The command table of harness/cli/main.py: it names what each module adds, and a command's run
imports only its own module."""
import subprocess
import sys

import pytest

from harness.cli.main import COMMANDS, build_parser, module_of
from harness.model.config import REPO_ROOT
from tests.helpers import parser_commands


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_each_module_adds_the_commands_the_table_names(module):
    assert parser_commands(build_parser([module])) == set(COMMANDS[module])


def test_the_whole_parser_has_every_command_once():
    named = [command for commands in COMMANDS.values() for command in commands]
    assert len(named) == len(set(named))
    assert parser_commands(build_parser()) == set(named)


def test_no_command_or_a_misspelt_one_gets_the_whole_parser():
    assert module_of([]) is None and module_of(["-h"]) is None and module_of(["plna"]) is None
    assert module_of(["inspect-checkpoint", "x"]) == ["partition"]


def test_a_command_imports_only_its_own_module():
    probe = ("import sys\nfrom harness.cli.main import main\n"
             "try:\n    main(['plan', '--help'])\nexcept SystemExit:\n    pass\n"
             "print('loaded', *sorted(m for m in sys.modules if m.startswith('harness.cli.')))")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("loaded "))
    loaded = set(line.split()[1:]) & {f"harness.cli.{m}" for m in COMMANDS}
    assert loaded == {"harness.cli.plan"}, loaded
