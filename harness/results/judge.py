"""Kept for the modules that import it by this name (the site, the fleet, the simulation): the
benchmark verdict lives in harness/results/verdict/, behind judge(store, run)."""
from .constants import CONFIDENCE, FIRST_LOOK_SHARE, GROUP_RUNS, LOOKBACK, PRIMARY_SHARE, SPENDING_RHO
from .verdict.figures import NPU_CORE, STEP, figures, npu_core, parse_threshold
from .verdict.history import judge_figure, judge_figures, judge_values
from .verdict.judging import board_change, confirm, judge_run, judge_stored
from .verdict.looks import look_alpha, since_change
from .verdict.record import board_record, figure_noise, record_before, record_of, same_cpus
from .verdict.reference import READ_RUNS, comparability, is_confirmation, since_stack_change
from .verdict.verdict import FIRST, HISTORY, NOT_COMPARABLE, UPGRADE, Verdict, group_note

Judgement = Verdict     # the verdict's former name

__all__ = ["Judgement", "Verdict", "judge_run", "judge_stored", "confirm", "is_confirmation", "since_stack_change",
           "figures", "judge_figure", "judge_figures", "judge_values", "parse_threshold", "since_change",
           "comparability", "npu_core", "group_note", "HISTORY", "UPGRADE", "FIRST", "NOT_COMPARABLE", "STEP",
           "NPU_CORE", "LOOKBACK", "CONFIDENCE", "GROUP_RUNS", "PRIMARY_SHARE", "SPENDING_RHO", "FIRST_LOOK_SHARE",
           "look_alpha", "board_change", "board_record", "record_of", "record_before", "same_cpus", "figure_noise",
           "READ_RUNS"]
