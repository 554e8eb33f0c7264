"""`bin/harness lab ...`: the lab's boards.

    lab lava-job --board NAME --tier smoke|pr|nightly --suite-sha SHA [--set KEY=VALUE]... [--out FILE]
                                         the LAVA job of one board profile (boards/NAME.toml [lava])
    lab lava-job --board NAME --tier smoke --health-check [--set ...] [--allow-placeholders]
                                         the board's device type's health check (the default branch)
    lab verdict OUT [--log FILE] | --server URL --job N
                                         a LAVA job as a gate: 0 passed, 1 a gate failed, 2 the lab failed
                                         or nothing ran (lava-run's output folder, or a server's job)
    lab setup-board [--root /] [--user anima-ci]
                                         the board's directories (/var/lib/anima-ci and what the sessions write)
"""
from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from ..core.atomic import atomic_write_text
from ..core.errors import ConfigError
from ..lab.jobs import SUITE_REPO, TIERS, job_yaml, lava_job, load_board
from ..lab.setup import setup_board
from ..lab.verdict import fetch_server_log, judge, read_output_dir

__all__ = ["add_command"]


def add_command(subparsers) -> argparse.ArgumentParser:
    """Register `lab` on the CLI's subparsers."""
    parser = subparsers.add_parser("lab", help="the lab's boards: LAVA jobs per board profile, the board's directories")
    sub = parser.add_subparsers(dest="lab_command", required=True)
    job = sub.add_parser("lava-job", help="write the LAVA job of one board profile and tier")
    job.add_argument("--board", required=True, help="the board profile boards/NAME.toml (its [lava] table)")
    job.add_argument("--tier", required=True, choices=TIERS, help="smoke (the smoke tier only), pr or nightly")
    job.add_argument("--suite-sha", help="the reviewed commit the job checks out: a commit of this checkout "
                                         "(HEAD, a full id) where the profile is committed as it is here")
    job.add_argument("--suite-repo", default=SUITE_REPO, help="the suite's repository (default: %(default)s)")
    job.add_argument("--set", dest="values", action="append", default=[], metavar="KEY=VALUE",
                     help="a test parameter of lava/definitions/anima-npu.yaml (PARTITION_URL, ...); repeatable")
    job.add_argument("--health-check", action="store_true",
                     help="the device type's health check: the smoke tier of the default branch")
    job.add_argument("--allow-placeholders", action="store_true",
                     help="write the store's placeholder URLs for the parameters not --set (a template)")
    job.add_argument("--out", type=Path, help="the job file (default: standard output)")
    job.set_defaults(func=_cmd_lava_job)
    verdict = sub.add_parser("verdict", help="a LAVA job as a gate: exit 0 passed, 1 a gate failed, 2 the lab "
                                              "failed or nothing ran")
    verdict.add_argument("out", nargs="?", type=Path, help="lava-run's --output-dir (its log: OUT/output.yaml)")
    verdict.add_argument("--log", type=Path, help="lava-run's log, its standard error (default: OUT/output.yaml)")
    verdict.add_argument("--server", help="a LAVA server (https://lava.example): the job's log by its REST API; "
                                          "a token in $LAVA_TOKEN")
    verdict.add_argument("--job", type=int, help="the server's job id")
    verdict.set_defaults(func=_cmd_verdict)
    setup = sub.add_parser("setup-board", help="make the board's directories, owned by its CI user")
    setup.add_argument("--root", type=Path, default=Path("/"), help="the board's root (default: %(default)s)")
    setup.add_argument("--user", default="anima-ci", help="the CI user: the GitHub runner's, or root on a LAVA "
                                                          "device (default: %(default)s)")
    setup.set_defaults(func=_cmd_setup_board)
    return parser


def _values(pairs: list[str]) -> dict:
    values = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair}: expected KEY=VALUE")
        values[key] = value
    return values


def _cmd_lava_job(args) -> int:
    board = load_board(args.board)
    job = lava_job(board, args.tier, suite_sha=args.suite_sha, suite_repo=args.suite_repo,
                   values=_values(args.values), health_check=args.health_check,
                   allow_placeholders=args.allow_placeholders)
    text = job_yaml(job, "bin/harness lab " + shlex.join(["lava-job", "--board", args.board, "--tier", args.tier]
                                                       + (["--health-check"] if args.health_check else [])))
    if args.out is None:
        print(text, end="")
    else:
        atomic_write_text(args.out, text)
        print(f"{args.out}: {job['job_name']}, device type {board.device_type}")
    return 0


def _cmd_verdict(args) -> int:
    if (args.server is None) == (args.out is None) or (args.server is not None) != (args.job is not None):
        raise ConfigError("lab verdict: lava-run's output folder OUT, or --server URL --job N")
    job = (read_output_dir(args.out, args.log) if args.out is not None
           else fetch_server_log(args.server, args.job, os.environ.get("LAVA_TOKEN")))
    code, lines = judge(job)
    print("\n".join(lines))
    return code


def _cmd_setup_board(args) -> int:
    for folder in setup_board(args.root, args.user):
        print(f"{folder}  owned by {args.user}")
    return 0
