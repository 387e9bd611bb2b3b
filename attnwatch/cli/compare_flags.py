"""`attnwatch compare`'s flags: their definitions, the defaults told apart from what was typed, and
the refusal of a flag the chosen mode would silently ignore (the variant flags with --pytest,
--pytest-args without it). attnwatch.cli.commands.compare runs what they ask for."""

from __future__ import annotations

from pathlib import Path

from attnwatch.ci.errors import UserError
from attnwatch.ci.variant_modules import add_arguments as add_variant_arguments
from attnwatch.history.analysis.ab import METHODS

# The defaults of the flags whose argparse default is None so that "given" can be told from
# "defaulted" (the --pytest check below); resolved here, once, by resolve_defaults.
DEFAULTS = {"shapes": "pr", "causal": "both", "ncu": "changed", "pytest_args": ""}

# Flags a --pytest run has no use for, by what it does instead (one clause each of the refusal).
NOT_WITH_PYTEST = (
    (
        ("shapes", "variants", "dtypes", "causal", "all", "variant_module", "variant_path"),
        "measures the suite's own tests (choose them with --pytest-args, e.g. '-k softmax', or a node id as PATH)",
    ),
    (("min_rounds", "workers_per_side"), "runs the whole suite afresh on each side, a fixed --rounds times"),
    (("no_correctness",), "checks correctness by the suite's own asserts"),
    (("ncu", "ncu_budget"), "runs no ncu pass"),
    (("case_timeout",), "bounds each suite run by ci/run_config.toml [compare] pytest_suite_timeout_s"),
    (("base_root", "base_bundles", "head_bundles"), "measures git worktrees of --base (or --baseline) and --head"),
)
ONLY_WITH_PYTEST = ("pytest_args",)


def add_arguments(p) -> None:
    """Every flag of `attnwatch compare` on its parser `p`."""
    p.add_argument("--base", help="base revision (the merge base with --head is what gets measured)")
    p.add_argument(
        "--baseline",
        help="a pinned baseline of history/analysis/baselines.toml (or $ATTNWATCH_BASELINES) as the base: "
        "its commit is measured against the head",
    )
    p.add_argument("--head", default="HEAD", help="head revision (default HEAD)")
    p.add_argument("--shapes", help=f"shape set (default {DEFAULTS['shapes']})")
    p.add_argument(
        "--pytest",
        metavar="PATH",
        help="instead of the registry's variants, A/B this pytest suite of gpu_benchmark tests: run in each "
        "side's checkout, alternately, --rounds times (default: ci/run_config.toml [compare] min_rounds); "
        "the variant flags (--variants, --shapes, --ncu, ...) are refused with it",
    )
    p.add_argument("--pytest-args", help="with --pytest: more pytest arguments, one string (e.g. '-k softmax')")
    p.add_argument("--variants", help="comma-separated variants (default: every registered variant)")
    p.add_argument("--dtypes", help="comma-separated dtypes (default: the shape set's)")
    p.add_argument("--causal", choices=("both", "yes", "no"), help=f"(default {DEFAULTS['causal']})")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="most alternating rounds per side; a case stops earlier once decided (default: ci/run_config.toml [compare])",
    )
    p.add_argument(
        "--min-rounds",
        type=int,
        default=None,
        help="rounds before the first look (default: ci/run_config.toml [compare]; = --rounds for a fixed design)",
    )
    p.add_argument(
        "--workers-per-side",
        type=int,
        default=None,
        help="warm workers per side, taking the rounds in turn so the interval sees their process offsets "
        "(default: ci/run_config.toml [compare.<device>])",
    )
    p.add_argument(
        "--method",
        choices=METHODS,
        default=None,
        help="interval of head/base: paired t over rounds, two-level or pooled bootstrap "
        "(default: ci/run_config.toml [compare])",
    )
    p.add_argument("--thresholds", help="thresholds TOML (default history/analysis/thresholds.toml)")
    p.add_argument(
        "--case-rules",
        help="per-case min effect and ignore rules (default history/analysis/case_rules.toml or $ATTNWATCH_CASE_RULES)",
    )
    p.add_argument(
        "--fail-on",
        choices=("regression", "never"),
        default="never",
        help="'regression': exit 1 on a regression, a correctness failure or an unmeasured head case; "
        "a side with uncommitted changes is refused (--allow-dirty)",
    )
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="with --fail-on regression, judge a checkout with uncommitted changes anyway (compare.json and "
        "the comment still mark that side)",
    )
    p.add_argument("--out", default="compare-out", help="output directory (default ./compare-out)")
    p.add_argument(
        "--ncu",
        choices=("changed", "all", "off"),
        nargs="?",
        const="all",
        help="after the rounds, profile under ncu the regressed and improved cases on both sides "
        f"(default '{DEFAULTS['ncu']}'; the counter rules explain them in compare.json and the comment), "
        "every measured case ('all'; bare --ncu), or none ('off'); skipped where ncu is absent",
    )
    p.add_argument(
        "--ncu-budget",
        type=float,
        default=None,
        help="seconds for the ncu pass, both sides (default: ci/run_config.toml [compare] ncu_budget_s)",
    )
    p.add_argument(
        "--case-timeout",
        type=float,
        default=None,
        help="seconds of silence before a case is killed (default: ci/run_config.toml, by device)",
    )
    p.add_argument("--no-correctness", action="store_true", default=None, help="skip the correctness checks")
    p.add_argument(
        "--all",
        action="store_true",
        default=None,
        help="measure every variant; by default a variant whose fingerprint (code, data files, binaries, "
        "libraries, settings) is identical on both sides is not measured, except the reference and "
        "an A/A canary (ci/compare/select.py)",
    )
    add_variant_arguments(p)
    p.add_argument(
        "--base-root",
        type=Path,
        help="a checkout of the base (holding kernels/) to measure instead of a git worktree of the merge "
        "base: for hosts without the repository's history",
    )
    p.add_argument("--base-bundles", nargs="+", type=Path, help="compare these recorded base bundles (no measuring)")
    p.add_argument("--head-bundles", nargs="+", type=Path, help="...against these head bundles")


def check_mode_flags(args) -> None:
    """Refuse, before any work, a flag the chosen mode would silently ignore: the variant flags
    with --pytest (which measures a suite's tests) and --pytest-args without it. "Given" is "not
    None" (these flags' argparse default is None); `--ncu off` is accepted with --pytest, as it
    asks for what a --pytest run does anyway."""
    given = lambda dest: getattr(args, dest, None) is not None  # noqa: E731
    flag = lambda dest: "--" + dest.replace("_", "-")  # noqa: E731
    if not args.pytest:
        stray = [flag(d) for d in ONLY_WITH_PYTEST if given(d)]
        if stray:
            raise UserError(
                f"{', '.join(stray)} applies only with --pytest PATH (without it, the registry's variants "
                "are measured: choose them with --variants, --shapes, --dtypes, --causal)"
            )
        return
    refused, instead = [], []
    for dests, what in NOT_WITH_PYTEST:
        named = [flag(d) for d in dests if given(d) and not (d == "ncu" and args.ncu == "off")]
        if named:
            refused += named
            instead.append(what)
    if refused:
        raise UserError(
            f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not apply with --pytest, "
            f"which {'; '.join(instead)}"
        )


def resolve_defaults(args) -> None:
    """Give each flag the user left out its DEFAULTS value, as `_run` reads them (after the
    mode check, which must see what was typed)."""
    for dest, value in DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)
