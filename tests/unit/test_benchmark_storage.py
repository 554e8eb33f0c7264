"""pytest-benchmark keeps no second store: its own saving is refused in a real pytest session, and the
refusal names the results store that replaces it."""
import pytest


# One refusal in the fast tier; the same loop refuses the other two (full suite).
@pytest.mark.parametrize("option", ["--benchmark-autosave",
                                    pytest.param("--benchmark-save=run", marks=pytest.mark.slow),
                                    pytest.param("--benchmark-compare-fail=mean:5%", marks=pytest.mark.slow)])
def test_pytest_benchmarks_own_storage_is_refused(pytester, option):
    pytester.makepyfile(test_tiny="def test_tiny(benchmark):\n    benchmark.pedantic(sum, (range(10),), rounds=1)\n")
    result = pytester.runpytest_subprocess(
        "-p", "harness.pytest_plugin", "-p", "no:cacheprovider", option,
        f"--artifacts={pytester.path / 'artifacts'}", f"--results=sqlite:///{pytester.path / 'r.sqlite'}",
        f"--telemetry-root={pytester.path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option.split('=')[0]} is refused*use *"])
    assert not list(pytester.path.rglob("*.json")), "nothing may be saved by pytest-benchmark"
