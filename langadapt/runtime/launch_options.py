"""What one `langadapt launch` asks for: its flags (`add_launch_arguments`) and, read once from the
command line and the recipe's cluster, the frozen `LaunchOptions` every script of a launch or a
sweep is written from (`runtime.launch.launch_from_options`, `experiments.sweep`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from langadapt.recipe.cluster import ClusterConfig
from langadapt.runtime.presets import PRESETS


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """The `langadapt launch` flags (all but the recipe, --set and --slurm, which the CLI owns). Nodes,
    GPUs per node and profiled steps are recipe keys (`--set cluster.nodes=16`, `cluster.gpus_per_node`,
    `stage2.profile_steps`), not flags."""
    parser.add_argument("--preset", default="lumi-g", choices=sorted(PRESETS), help="cluster preset")
    parser.add_argument("--time", help="training job's time limit per submission, Slurm syntax (default: 24:00:00; "
                        "with --sweep: 1:00:00; preparation: --set cluster.preparation.time=...)")
    parser.add_argument("--account", help="account/project to charge (both jobs, unless cluster.preparation.account)")
    parser.add_argument("--partition", help="training job's partition (default: the preset's; preparation: "
                        "cluster.preparation.partition)")
    parser.add_argument("--job-name", help="job name (default: the recipe's file name)")
    parser.add_argument("--signal-seconds", type=int, default=600,
                        help="SIGUSR1 this many seconds before the limit: checkpoint and requeue (0: off)")
    parser.add_argument("--max-requeues", type=int, default=20, help="give up after this many requeues")
    parser.add_argument("--setup", action="append", metavar="LINE",
                        help="shell line preparing the environment (repeatable; default: an EDIT block)")
    parser.add_argument("--run-prefix", help='task command prefix, e.g. "singularity exec $SIF"')
    parser.add_argument("--sbatch", dest="extra_sbatch", action="append", default=[], metavar="OPTION",
                        help="extra #SBATCH option, e.g. --sbatch=--exclusive (repeatable)")
    parser.add_argument("--out", help="script path (default: <recipe>.<preset>.sbatch here)")
    parser.add_argument("--sweep", action="extend", nargs="+", default=[], metavar="KEY=V1,V2",
                        help="scaling sweep: one short stage-2 job per configuration, e.g. --sweep nodes=1,2,4 "
                             "gpus=1,8 (keys: nodes, gpus); writes a sweep folder (--out; default RUN_ROOT/NAME-sweep)")
    parser.add_argument("--steps", type=int, help="with --sweep: stage-2 steps per configuration (default 30)")
    parser.add_argument("--warmup-steps", type=int,
                        help="with --sweep: first steps left out of the median tokens/s (default 5)")


@dataclass(frozen=True)
class LaunchOptions:
    """What one `langadapt launch` asks for, fixed when the command line is read (`from_args`).

    The flags of `add_launch_arguments`, the CLI's own (`--dry-run`, `--set` as `langadapt run`
    arguments) and the nodes and GPUs per node the recipe's cluster gives. `cmd_launch` used to
    write the last two into the argparse Namespace and pass the namespace down: a reader of the
    launch code could not tell a flag from what the CLI had put there, and any callee could change
    either. Frozen, and built in one place, every script of a launch or a sweep reads the same values.
    """

    recipe: Path
    nodes: int
    """The recipe's `cluster.nodes`: what `plan` and preflight assumed (`--set cluster.nodes=N`)."""
    gpus_per_node: int | None = None
    """The recipe's `cluster.gpus_per_node` only where the recipe sets it; None: the preset's."""
    run_args: tuple[str, ...] = ()
    """Arguments after the recipe in every `langadapt run` of the scripts: the `--set` overrides."""
    dry_run: bool = False
    """Render the scripts and write nothing."""
    preset: str = "lumi-g"
    time: str | None = None
    """The training job's limit; None: 24:00:00 for a run, `experiments.sweep.DEFAULT_TIME` for a sweep."""
    account: str | None = None
    partition: str | None = None
    job_name: str | None = None
    signal_seconds: int = 600
    max_requeues: int = 20
    setup: tuple[str, ...] | None = None
    run_prefix: str | None = None
    extra_sbatch: tuple[str, ...] = ()
    out: Path | None = None
    sweep: tuple[str, ...] = ()
    """`--sweep KEY=V1,V2 ...`; empty: one run's scripts."""
    steps: int | None = None
    warmup_steps: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, cluster: ClusterConfig) -> LaunchOptions:
        """The options of the CLI's `launch` namespace (the recipe, `--set` and `--dry-run`, then
        `add_launch_arguments`' flags) with the recipe's `cluster`."""
        # The recipe's gpus_per_node only where the recipe sets it: the default 1 would undercut any preset.
        gpus = cluster.gpus_per_node if "gpus_per_node" in cluster.model_fields_set else None
        return cls(recipe=Path(args.recipe), nodes=cluster.nodes, gpus_per_node=gpus,
                   run_args=tuple(part for override in args.overrides for part in ("--set", override)),
                   dry_run=args.dry_run, preset=args.preset, time=args.time, account=args.account,
                   partition=args.partition, job_name=args.job_name, signal_seconds=args.signal_seconds,
                   max_requeues=args.max_requeues, setup=None if args.setup is None else tuple(args.setup),
                   run_prefix=args.run_prefix, extra_sbatch=tuple(args.extra_sbatch),
                   out=None if args.out is None else Path(args.out), sweep=tuple(args.sweep), steps=args.steps,
                   warmup_steps=args.warmup_steps)


def sbatch_options(options: LaunchOptions) -> dict[str, object]:
    """The `write_sbatch` arguments that a launch's options set for every script alike (a run's,
    or each of a sweep's); nodes, time, paths and run arguments are the caller's."""
    return {"preset": options.preset, "gpus_per_node": options.gpus_per_node, "account": options.account,
            "partition": options.partition, "signal_seconds": options.signal_seconds,
            "max_requeues": options.max_requeues, "setup": None if options.setup is None else list(options.setup),
            "run_prefix": options.run_prefix, "extra_sbatch": list(options.extra_sbatch)}

