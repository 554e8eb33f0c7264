"""The suite's pytest session has one place (harness/pytest_plugin/plugin.py): every pytest hook the suite
implements is implemented by one of its modules, once, and no other module of the plugin defines one
(a `pytest_*` function in a part is either never called or called beside plugin.py's, in pluggy's order
rather than the written one)."""
import importlib
import pkgutil

import harness.pytest_plugin

SESSION = "harness.pytest_plugin.plugin"


def _suite_hookimpls(pluginmanager) -> dict[str, list[str]]:
    """Hook name -> the suite's registered plugins (harness.*) implementing it, as pluggy calls them."""
    found: dict[str, list[str]] = {}
    for name, caller in vars(pluginmanager.hook).items():
        if not name.startswith("pytest_"):
            continue
        for impl in reversed(caller.get_hookimpls()):
            module = getattr(impl.function, "__module__", "") or ""
            if module.startswith("harness."):
                found.setdefault(name, []).append(module)
    return found


def test_each_hook_is_implemented_once_by_the_session_module(request):
    found = _suite_hookimpls(request.config.pluginmanager)
    twice = {name: modules for name, modules in found.items() if len(modules) > 1}
    assert not twice, f"hooks implemented by more than one of the suite's modules: {twice}"
    elsewhere = {name: modules for name, modules in found.items() if modules != [SESSION]}
    assert not elsewhere, f"hooks implemented outside {SESSION}: {elsewhere}"
    # the session's own steps, each registered: configure and the session's start and end at least
    assert {"pytest_configure", "pytest_sessionstart", "pytest_sessionfinish", "pytest_unconfigure",
            "pytest_collection_modifyitems", "pytest_runtest_makereport"} <= set(found)


def test_no_part_defines_a_hook_of_its_own():
    defined = {}
    for info in pkgutil.iter_modules(harness.pytest_plugin.__path__, "harness.pytest_plugin."):
        module = importlib.import_module(info.name)
        hooks = sorted(n for n, v in vars(module).items()
                       if n.startswith("pytest_") and callable(v) and getattr(v, "__module__", None) == info.name)
        if hooks and info.name != SESSION:
            defined[info.name] = hooks
    assert not defined, f"pytest hooks defined outside {SESSION}: {defined}"
