"""`python -m harness accept-golden CASE`: promote the obtained image of the last quality run to the
golden, without rendering again.

Every quality run keeps its obtained float32 image (artifacts/runs/<case>-image.npy) beside its run
report (artifacts/runs/<case>.json). Accepting it makes the same refusals as `--update-goldens`: a
non-reference precision (e.g. the FFN W8A8 what-if) needs --force, and so does nothing else; a run that
failed, or that was rendered with other settings than the case now asks for, is refused outright.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..core.run_report import read_run_report
from ..gates.cases import golden_dir_for, load_cases
from ..gates.golden import GoldenStale, GoldenStore, relative_to_repo

__all__ = ["accept_golden", "add_command"]


def _run_files(artifacts: Path, case: str) -> tuple[dict, np.ndarray]:
    report_path = artifacts / "runs" / f"{case}.json"
    image_path = artifacts / "runs" / f"{case}-image.npy"
    for path in (report_path, image_path):
        if not path.is_file():
            raise ConfigError(f"accept-golden {case}: no {path}; run the quality gate first "
                              f"(pytest -m quality --cases={case} --artifacts={artifacts})")
    report = read_run_report(report_path)
    try:
        image = np.load(image_path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"accept-golden {case}: cannot read {image_path}: {exc}") from None
    if report.get("status") != "ok":
        raise ConfigError(f"accept-golden {case}: the run in {report_path} did not finish "
                          f"(status {report.get('status')}: {report.get('error')})")
    return report, image


def accept_golden(case_name: str, artifacts: Path, golden_dir: Path | None = None,
                  force: bool = False) -> tuple[list[Path], dict]:
    """Write the golden of `case_name` from the artifacts; returns (files written, metadata)."""
    report, image = _run_files(artifacts, case_name)
    golden_dir = golden_dir or golden_dir_for(report["model"])
    cases = {c.name: c for c in load_cases(golden_dir / "cases.toml")}
    if case_name not in cases:
        raise ConfigError(f"accept-golden: no case '{case_name}' in {golden_dir / 'cases.toml'} "
                          f"(cases: {', '.join(sorted(cases))})")
    case = cases[case_name]
    ran = report.get("settings", {})
    want = {"steps": case.steps, "seed": case.seed, "cfg_scale": case.cfg, "shift": case.shift}
    changed = {k: (ran.get(k), v) for k, v in want.items() if ran.get(k) != v}
    if changed or (case.text_emb is None and report.get("prompt") != case.prompt):
        detail = ", ".join(f"{k}: run {a!r} vs case {b!r}" for k, (a, b) in changed.items()) or "prompt differs"
        raise GoldenStale(f"accept-golden {case_name}: the kept run was rendered with other settings "
                          f"({detail}); run the quality gate again")
    export = report.get("export") or {}
    precision = export.get("dtype", "unknown") + (f"+{export['fake_quant']}" if export.get("fake_quant") else "")
    meta = {"backend": report["backend"], "manifest_hash": report["manifest_sha256"], "model": report["model"],
            "partition": relative_to_repo(report["partition"]), "accepted_from": report.get("run_id") or "artifacts"}
    store = GoldenStore(golden_dir)
    full = store.write(case, image, meta, precision=precision, force=force)
    return list(store.paths(case).values()), full


def add_command(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("accept-golden", help="promote a quality run's obtained image to the golden")
    parser.add_argument("case", help="golden case name")
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"),
                        help="artifacts folder of the run (default: %(default)s)")
    parser.add_argument("--golden-dir", type=Path, help="golden folder (default: golden/<model of the run>)")
    parser.add_argument("--force", action="store_true",
                        help="accept an image from a non-reference precision (as --force-goldens)")
    parser.set_defaults(func=_cmd_accept)
    return parser


def _cmd_accept(args) -> int:
    written, meta = accept_golden(args.case, args.artifacts, args.golden_dir, args.force)
    for path in written:
        print(f"wrote {path}")
    print(f"golden {args.case}: accepted from a {meta['precision']} {meta['backend']} run")
    return 0
