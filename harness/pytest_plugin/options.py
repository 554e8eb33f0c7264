"""The suite's options and how they become one SuiteSettings.

Every option can also come from a board profile (`--board-profile boards/NAME.toml`, table [suite]),
so a runner's settings live in the repository. Precedence: command line > board profile > default.
Backend-specific options (core mask, fault) are parsed by the backend that owns them.
"""
from __future__ import annotations

import argparse
from dataclasses import field, make_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cli.options import RENAMED, SUITE_OPTIONS, check_precision, flag_of, renamed_line, resolve_backend
from ..core.errors import ConfigError, HarnessError
from ..core.schema import read_toml
from ..model.config import load_model_dir

__all__ = ["SuiteSettings", "resolve_settings", "new_names", "OPTIONS", "RENAMED"]

# The suite's options are the shared declaration's (harness/cli/options.py); the commands read the same.
OPTIONS = SUITE_OPTIONS
_FLAGS = {n for n, o in OPTIONS.items() if o.kind == "flag"}
_INTS = {n for n, o in OPTIONS.items() if o.kind == "count"}
_SIZES = {n for n, o in OPTIONS.items() if o.kind == "size"}
_PATHS = {n for n, o in OPTIONS.items() if o.kind == "path"}

# How a typed option value is held in the settings (a size is parsed to bytes, a threshold to percent).
_SETTINGS_TYPES = {"flag": bool, "count": "int | None", "size": "int | None", "path": "Path | None"}
# What the settings hold besides the options: decided from them when the session starts.
_DECIDED = [
    ("backend_requested", str, "auto"),
    ("on_board", bool, False),
    ("board_profile", "Path | None", None),
    ("golden_dir_given", bool, False),     # named on the command line or in the profile
    ("backend_options", "BackendOptions | None", None),      # built here, from the values above
    ("npu_problem", "str | None", None),   # why --require-npu cannot be met here (None: it can)
    ("renamed", list, field(default_factory=list)),    # one line per old option spelling used
]


def _settings_fields() -> list:
    fields = [(name, _SETTINGS_TYPES.get(o.kind, "str | None"), field(default=None)) for name, o in OPTIONS.items()]
    return fields + _DECIDED


# One field per option (typed: sizes in bytes, the threshold in percent) plus what is decided from them.
if TYPE_CHECKING:
    class SuiteSettings:
        """The fields are made from OPTIONS at run time: mypy sees any attribute, each of type Any."""
        def __init__(self, **fields: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...
else:
    SuiteSettings = make_dataclass("SuiteSettings", _settings_fields())
    SuiteSettings.__module__ = __name__
    SuiteSettings.__doc__ = "The session's settings: every option of the declaration, typed, and what they decide."


def addoption(parser):
    group = parser.getgroup("anima", "Anima NPU acceptance suite")
    group.addoption("--board-profile", default=None, help="TOML with a [suite] table of these options")
    for name, option in OPTIONS.items():
        flag = "--" + name.replace("_", "-")
        if name in _FLAGS:      # --x / --no-x: the command line can turn off a profile's flag
            group.addoption(flag, action=argparse.BooleanOptionalAction, default=None, help=option.help)
        else:
            group.addoption(flag, default=None, help=option.help)
    for old in RENAMED:         # the old spelling, its own dest: resolve_settings says the new one
        group.addoption(flag_of(old), dest=old, default=None, help=argparse.SUPPRESS)


def new_names(values: dict, source: str) -> tuple[dict, list[str]]:
    """`values` (the command line's or a profile table's) with each old option name read as its new
    one, and the line each old spelling used gets. The new spelling wins when both are given."""
    values, lines = dict(values), []
    for old, new in RENAMED.items():
        if values.get(old) is None:
            values.pop(old, None)
            continue
        value = values.pop(old)
        lines.append(f"{source}: " + (renamed_line(flag_of(old), flag_of(new)) if source == "command line"
                                      else renamed_line(old, new)))
        if values.get(new) is None:
            values[new] = value
    return values, lines


def _profile_values(path: Path | None, tier: str | None = None) -> tuple[dict, list[str]]:
    if path is None:
        if tier:
            raise ConfigError(f"--tier {tier}: tiers are tables of a board profile; name one with --board-profile")
        return {}, []
    data = read_toml(path, "board profile (--board-profile)")
    suite, lines = new_names(data.get("suite", {}), f"{path} [suite]")
    tiers = data.get("tier", {})
    tier = tier or suite.get("tier")
    if tier is not None and tier not in tiers:
        raise ConfigError(f"--tier {tier}: {path} has no [tier.{tier}] table "
                          f"(tiers: {', '.join(sorted(tiers)) or 'none'})")
    chosen, more = new_names(tiers[tier], f"{path} [tier.{tier}]") if tier else ({}, [])
    tables = [("suite", suite)] + ([(f"tier.{tier}", chosen)] if tier else [])
    for name, table in tables:
        unknown = sorted(set(table) - set(OPTIONS))
        if unknown:
            raise ConfigError(f"--board-profile {path}: unknown [{name}] option '{unknown[0]}' "
                              f"(known: {', '.join(OPTIONS)})")
    suite.update(chosen)
    return suite, lines + more


def typed_value(name: str, value, source: str):
    if value is None:
        return None
    try:
        if name in _FLAGS:
            if isinstance(value, str):
                return value.lower() in ("1", "true", "yes")
            return bool(value)
        if name in _INTS:
            number = int(value)
            if number < 1:
                raise ValueError
            return number
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: {name.replace('_', '-')} expects a positive whole number, "
                          f"got {value!r}") from None
    if name in _SIZES:
        from ..memory.guard import parse_size
        try:
            parse_size(value)       # checked here, where the option and its source are known
        except ConfigError as exc:
            raise ConfigError(f"{source}: --{name.replace('_', '-')}: {exc}") from None
        return value
    if name == "results":
        from ..results.store import absolute_url
        return absolute_url(str(value), Path.cwd())
    if name in _PATHS:
        path = Path(value).expanduser()
        return path if path.is_absolute() else (Path.cwd() / path)
    return str(value)


def resolve_settings(cli: dict, profile_path: str | None) -> SuiteSettings:
    """Merge command line, board profile and defaults, and decide the backend."""
    from ..backends import backend_options
    from ..memory.guard import parse_size
    from ..results.ab import parse_confidence
    from ..results.telemetry import detect_rk3588
    from ..results.verdict.figures import parse_threshold
    from ..results.verdict.power import parse_detect
    profile_file = Path(profile_path) if profile_path else None
    cli, lines = new_names(cli, "command line")
    profile, more = _profile_values(profile_file, cli.get("tier"))
    values = {}
    for name, option in OPTIONS.items():
        default = option.default
        if cli.get(name) is not None:
            values[name] = typed_value(name, cli[name], "command line")
        elif name in profile:
            values[name] = typed_value(name, profile[name], f"{profile_file} [suite]")
        else:
            values[name] = typed_value(name, default, "default")
    on_board = detect_rk3588(values["telemetry_root"])
    requested = values["backend"]
    backend = resolve_backend(requested, on_board)
    from ..lifecycle import parse_lifecycle
    lifecycle = str(parse_lifecycle(values["lifecycle"]))
    from ..partition.granularity import parse_granularity
    values["granularity"] = str(parse_granularity(values["granularity"]))
    check_precision(backend, values["precision"])
    from ..partition.manifest import FAKE_QUANT
    if values["fake_quant"] not in (None, *FAKE_QUANT):
        raise ConfigError(f"--fake-quant {values['fake_quant']}: choose {', '.join(FAKE_QUANT)}")
    cfg = load_model_dir(values["model_dir"])
    from ..gates.cases import golden_dir_for
    golden_dir = values["golden_dir"] or golden_dir_for(cfg.name)
    budget = values["pss_budget"] or cfg.raw_gates.get("pss_budget")
    options = backend_options(backend, values, cfg)
    from ..sampling.spectrum import SAMPLERS
    if values["bench_sampler"] not in (None, *SAMPLERS):
        raise ConfigError(f"--bench-sampler {values['bench_sampler']}: choose {', '.join(SAMPLERS)}")
    if values["inconclusive"] not in ("auto", "fail", "warn"):
        raise ConfigError(f"--inconclusive {values['inconclusive']}: choose auto, fail or warn")
    if values["inconclusive"] == "auto":       # a board's gate fails; a PC rehearsing the gates is warned
        board = on_board or values["require_npu"] or profile_file is not None
        values["inconclusive"] = "fail" if board else "warn"
    cases = _case_names(values["cases"], golden_dir)
    typed = {name: values[name] for name in OPTIONS}
    typed.update({name: parse_size(values[name]) for name in _SIZES if values[name]})
    typed.update(backend=backend, golden_dir=golden_dir, cases=cases, lifecycle=lifecycle,
                 pss_budget=parse_size(budget) if budget else None,
                 fixed_threshold=parse_threshold(values["fixed_threshold"], "--fixed-threshold"),
                 detect=parse_detect(values["detect"]),
                 ab_threshold=parse_threshold(values["ab_threshold"], "--ab-threshold"),
                 ab_confidence=parse_confidence(values["ab_confidence"], "--ab-confidence"))
    settings = SuiteSettings(**typed, backend_requested=requested, on_board=on_board, board_profile=profile_file,
                             backend_options=options, golden_dir_given=values["golden_dir"] is not None,
                             renamed=lines + more)
    settings.npu_problem = _npu_problem(settings)
    return settings


def _case_names(spec: str | None, golden_dir: Path) -> list[str] | None:
    """--cases a,b: every name must be a case in golden_dir/cases.toml."""
    if spec is None:
        return None
    from ..gates.cases import load_cases
    names = [c.strip() for c in spec.split(",") if c.strip()]
    if not names:
        raise ConfigError(f"--cases {spec!r}: name at least one golden case")
    known = {c.name for c in load_cases(golden_dir / "cases.toml", thresholds=False)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"--cases: no golden case '{unknown[0]}' in {golden_dir / 'cases.toml'} "
                          f"(cases: {', '.join(sorted(known))})")
    return names


def _npu_problem(s: SuiteSettings) -> str | None:
    """Why the NPU requirement is not met here, or None when it is."""
    if not s.on_board:
        return (f"not an RK3588 board (no rockchip,rk3588 device tree, NPU device or librknnrt under "
                f"{s.telemetry_root})")
    if s.backend != "rknnlite":
        return f"backend is {s.backend}, not rknnlite"
    from ..backends.rknnlite import load_runtime
    try:
        load_runtime()
    except HarnessError as exc:
        return str(exc)
    return None
