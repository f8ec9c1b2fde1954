"""The training job's sbatch script for multi-node training: `render_sbatch`, `write_sbatch`.

One srun task per GPU runs `langadapt run RECIPE`; each task finds its rank, world and master
in Slurm's environment (`langadapt.runtime.distributed.DistInfo`), so the script contains no
torchrun and the same command also works under torchrun or the deepspeed launcher.

Time limits are survived, not suffered: Slurm sends the batch shell SIGUSR1 `signal_seconds`
before the limit (`--signal=B:USR1@T`); the script forwards it to srun, which forwards it to
every task; the training loop checkpoints and exits with `REQUEUE_EXIT_CODE`; the script then
runs `scontrol requeue`, and the requeued job resumes from that checkpoint. The signal goes to
the batch shell (B:) rather than straight to the tasks so that the script itself knows a requeue
was asked for, even if srun's exit code is masked (`--kill-on-bad-exit` reports 143 for the
ranks it had to stop).

`SbatchConfig` holds every setting of a generated script besides the recipe; the blocks both jobs
of a launch share (`setup_block`, `export_lines`, `command_check`, `job_name`) are here, and
`runtime.launch` renders the CPU preparation job and submit.sh around this script.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Literal

from pydantic import Field

from langadapt.errors import LangadaptError
from langadapt.recipe.base import Config
from langadapt.recipe.cluster import PreparationConfig, slurm_time_seconds
from langadapt.recipe.data import DatatroveConfig
from langadapt.runtime.hostlist import SLURM_PORT_BASE, SLURM_PORT_SPAN
from langadapt.runtime.presets import PRESETS, ClusterPreset, PresetName
from langadapt.runtime.signals import REQUEUE_EXIT_CODE

__all__ = ["SbatchConfig", "build_config", "render_sbatch", "write_sbatch"]


class SbatchConfig(Config):
    """Everything in a generated sbatch script besides the recipe (the CLI's `launch` flags)."""

    preset: PresetName | ClusterPreset = "lumi-g"
    """Built-in cluster preset name, or a ClusterPreset describing another cluster."""
    nodes: int = Field(1, ge=1)
    """Nodes; the job runs nodes x tasks_per_node ranks (CLI default: the recipe's cluster.nodes)."""
    gpus_per_node: int | None = Field(None, ge=1)
    """Training processes (one per GPU) per node; None: the preset's (CLI default: the recipe's
    cluster.gpus_per_node when the recipe sets it)."""
    time: str = "24:00:00"
    """Wall-time limit per submission, Slurm syntax (MM, HH:MM:SS, D-HH:MM:SS, ...)."""
    account: str | None = None
    """Project/account to charge (LUMI: project_465...); None: the user's default."""
    partition: str | None = None
    """Partition; None: the preset's (LUMI: standard-g) or the site default."""
    job_name: str | None = None
    """Job name; None: the recipe file's stem."""
    signal_seconds: int = Field(600, ge=0, le=65535)
    """Send SIGUSR1 this long before the time limit so the run checkpoints (0: no signal, no requeue)."""
    max_requeues: int = Field(20, ge=0)
    """Stop requeueing after this many restarts (guards against a loop that never progresses)."""
    setup: list[str] | None = None
    """Shell lines that prepare the software environment; None: a marked EDIT block with hints."""
    run_prefix: str | None = None
    """Prefix for each command, e.g. "singularity exec $SIF" (shell syntax, not quoted); None: the
    preset's (lumi-g: the container named by $LANGADAPT_SIF, if set at submit time or in setup)."""
    command: str = "langadapt run"
    """The per-task command; the recipe path and `run_args` follow it."""
    run_args: list[str] = Field(default_factory=list)
    """Extra arguments after the recipe, e.g. ["--set", "stage2.steps=100"] (quoted for the shell)."""
    prepare: bool = True
    """Run the single-process stages around the srun of the training stages: data..embeddings
    before it (here, or in the preparation job: `preparation`) and evaluate/export after it; False:
    srun runs `command` alone (for a command other than `langadapt run`)."""
    preparation: PreparationConfig | None = None
    """With `prepare`: the CPU job that runs data..embeddings before this one (`write_launch`), so
    this script runs only the training stages and evaluate/export; None: this batch shell runs them
    first (a script submitted alone, as a sweep's preparation job)."""
    datatrove: DatatroveConfig | None = None
    """With `preparation`: the recipe's `data.datatrove` when its data stage runs on datatrove over Slurm
    (`data.engine: datatrove`, `executor: slurm`; `launch_from_options` sets it): submit.sh submits the
    preparation through datatrove (`datatrove_submit_command`) instead of a prepare.sbatch; None: the
    one-node preparation job."""
    until: Literal["stage1", "stage2"] | None = None
    """Last pipeline stage the job runs (`--until`); None: the whole pipeline. A scaling sweep's
    preparation job stops after stage1, its configurations after stage2."""
    workdir: Path | None = None
    """Directory the job runs in (runs/ is created there); None: the current directory."""
    log_dir: str = "logs"
    """Slurm output folder, relative to workdir; created now (Slurm would not create it)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra exports after the preset's (and overriding them)."""
    extra_sbatch: list[str] = Field(default_factory=list)
    """Extra `#SBATCH` options verbatim, e.g. ["--exclusive", "--qos=high"] (the training job's only)."""

    def cluster(self) -> ClusterPreset:
        """The preset object in force, with `gpus_per_node` applied (one task per GPU)."""
        preset = PRESETS[self.preset] if isinstance(self.preset, str) else self.preset
        if self.gpus_per_node is None:
            return preset
        gpus = self.gpus_per_node if preset.gpus_per_node else 0
        return preset.model_copy(update={"tasks_per_node": self.gpus_per_node, "gpus_per_node": gpus})


def render_sbatch(recipe_path: str | Path, config: SbatchConfig) -> str:
    """The sbatch script text for `recipe_path` (made absolute: the job may run elsewhere)."""
    cluster, recipe = config.cluster(), Path(recipe_path).resolve()
    if config.signal_seconds and config.signal_seconds >= slurm_time_seconds(config.time):
        raise LangadaptError(
            f"launch signal_seconds: {config.signal_seconds} s is not shorter than the time limit {config.time}"
        )
    workdir = (config.workdir or Path.cwd()).resolve()
    via = " (datatrove: after its cleaning array)" if config.datatrove else ""
    after = [(f"# Runs after the preparation job {job_name(recipe, config)}-prepare{via} succeeded "
               "(its submit.sh submits both: --dependency=afterok).")] if config.prepare and config.preparation else []
    lines = ["#!/bin/bash", f"# langadapt training job, preset {cluster.name}: {recipe}", *after,
             "# Generated by `langadapt launch`; regenerate rather than edit, except the EDIT block.",
             *_directives(recipe, config, cluster, workdir), ""]
    lines += setup_block(config, cluster)
    lines += _env_block(config, cluster)
    lines += command_check(config)
    lines += _run_block(recipe, config, cluster)
    return "\n".join(lines) + "\n"


def job_name(recipe: Path, config: SbatchConfig) -> str:
    """The training job's name (`config.job_name`, else the recipe file's stem); the preparation
    job's adds `-prepare`."""
    return config.job_name or recipe.stem


def command_check(config: SbatchConfig) -> list[str]:
    """Stop at once with a clear line when the EDIT block was left as it is and langadapt is not
    on the PATH (instead of a `command not found` per task after the queue wait)."""
    first = shlex.split(config.command)[0]
    return [
        f'if [ -z "$RUN_PREFIX" ] && ! command -v {shlex.quote(first)} >/dev/null; then',
        f'  echo "langadapt: {first} not found on PATH: edit the EDIT block of this script" >&2; exit 2',
        "fi",
    ]


def _directives(recipe: Path, config: SbatchConfig, cluster: ClusterPreset, workdir: Path) -> list[str]:
    """The #SBATCH lines."""
    opts = [f"--job-name={job_name(recipe, config)}"]
    opts += [f"--account={config.account}"] if config.account else []
    partition = config.partition or cluster.partition
    opts += [f"--partition={partition}"] if partition else []
    opts += [f"--nodes={config.nodes}", f"--ntasks-per-node={cluster.tasks_per_node}"]
    opts += [f"--gpus-per-node={cluster.gpus_per_node}"] if cluster.gpus_per_node else []
    opts += [f"--cpus-per-task={cluster.cpus_per_task}"] if cluster.cpus_per_task else []
    opts += [f"--mem={cluster.mem}"] if cluster.mem else []
    opts += [f"--time={config.time}", f"--chdir={workdir}", f"--output={config.log_dir}/%x-%j.out",
             "--open-mode=append"]  # a requeued run keeps the job id: one log per job, appended
    # --requeue even without the warning signal: a run preempted with SIGTERM exits with the
    # requeue code too, and Slurm itself requeues requeueable jobs after a node failure.
    opts += [f"--signal=B:USR1@{config.signal_seconds}"] if config.signal_seconds else []
    opts += ["--requeue"]
    opts += config.extra_sbatch
    return [f"#SBATCH {opt}" for opt in opts]


def setup_block(config: SbatchConfig, cluster: ClusterPreset) -> list[str]:
    """The software environment: the given lines, or a clearly marked block to edit.

    RUN_PREFIX is defaulted after the block so that a RUN_PREFIX set inside it wins, and so that
    a default like "singularity exec $SIF" sees the SIF the block defined.
    """
    if config.setup is not None:
        block = ["# Software environment", *config.setup]
    else:
        block = [
            "# >>>>>>>>>> EDIT: software environment (placeholder: only comments as written) >>>>>>>>>>",
            "# Make `langadapt` runnable on the compute nodes, for example:",
            *(f"#   {hint}" for hint in cluster.setup_hint),
            "# <<<<<<<<<< end EDIT <<<<<<<<<<",
        ]
    prefix = cluster.run_prefix if config.run_prefix is None else config.run_prefix
    return [*block, f'RUN_PREFIX="${{RUN_PREFIX:-{prefix}}}"', ""]


def _env_block(config: SbatchConfig, cluster: ClusterPreset) -> list[str]:
    """Rendezvous (rank 0's node, a per-job port) and the preset's collective-library settings."""
    lines = [
        "# Rendezvous: ranks, world and local rank come from srun's SLURM_* variables per task.",
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        f"export MASTER_PORT=$(({SLURM_PORT_BASE} + SLURM_JOB_ID % {SLURM_PORT_SPAN}))",
    ]
    return lines + export_lines({**cluster.env, **config.env}, cluster.env_notes) + [""]


def export_lines(env: dict[str, str], notes: dict[str, str]) -> list[str]:
    """`export KEY="VALUE"` lines, each with the preset's reason for it as a comment."""
    return [f'export {key}="{value}"' + (f"  # {notes[key]}" if key in notes else "") for key, value in env.items()]


def _run_block(recipe: Path, config: SbatchConfig, cluster: ClusterPreset) -> list[str]:
    """The steps, each in the background (so the shell can take SIGUSR1), then requeue if asked.

    With `prepare`, up to three steps: data..embeddings in this batch shell (one process: a job
    step of its own would need a free task slot; `placement` knows the batch shell is not rank 0
    of N) unless the preparation job did them, the training stages under srun (the multi-rank
    part, which refuses to start otherwise), then evaluate/export here. The last is a plain
    `langadapt run`: complete stages are skipped, so a requeued job runs again only what is
    missing (`--from` would re-run evaluation each time).
    """
    srun = ["srun", "--kill-on-bad-exit=1", f"--ntasks-per-node={cluster.tasks_per_node}"]
    srun += [f"--cpus-per-task={cluster.cpus_per_task}"] if cluster.cpus_per_task else []
    srun += [f"--cpu-bind={cluster.cpu_bind}"] if cluster.cpu_bind else []
    extra = "".join(f" {shlex.quote(arg)}" for arg in config.run_args)

    def task(*stage_flags: str) -> str:  # stage flags right after the recipe, run_args last
        return f"$RUN_PREFIX {config.command} {shlex.quote(str(recipe))}{''.join(f' {f}' for f in stage_flags)}{extra}"

    until = ("--until", config.until) if config.until else ()
    if config.prepare:
        steps = [] if config.preparation else [f'step "data..embeddings (one process)" {task("--until", "embeddings")}']
        steps += [f'step "training (srun)" {" ".join(srun)} {task("--until", config.until or "stage2")}']
        steps += [] if config.until else [f'step "evaluate, export (one process)" {task()}']
    else:
        steps = [f'step "srun" {" ".join(srun)} {task(*until)}']
    return [
        (
            'echo "langadapt: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0}: $SLURM_JOB_NUM_NODES'
            ' nodes, master $MASTER_ADDR:$MASTER_PORT, $(date -Is)"'
        ),
        "",
        "REQUEUE=0; CHILD=; STATUS=0",
        "on_warning() {  # Slurm's time-limit warning: tell the running step to checkpoint and exit",
        '  echo "langadapt: SIGUSR1 (time limit near) at $(date -Is): checkpointing, then requeue"',
        '  REQUEUE=1; [ -n "$CHILD" ] && kill -USR1 "$CHILD" 2>/dev/null  # srun forwards it to all tasks',
        "}",
        "trap on_warning USR1",
        "step() {  # step NAME COMMAND...: run it, wait until it really ended; fail to stop the job",
        f'  [ "$REQUEUE" = 1 ] && {{ STATUS={REQUEUE_EXIT_CODE}; return 1; }}  # warned between steps',
        '  local name="$1"; shift',
        '  "$@" & CHILD=$!',
        "  while :; do  # `wait` also returns when the trap runs; wait again until the step ended",
        '    wait "$CHILD"; STATUS=$?',
        '    kill -0 "$CHILD" 2>/dev/null || break',
        "  done",
        "  CHILD=",
        '  echo "langadapt: $name exited with $STATUS at $(date -Is)"',
        '  [ "$STATUS" -eq 0 ]',
        "}",
        " && \\\n".join(steps),
        f'if [ "$STATUS" -ne 0 ] && {{ [ "$REQUEUE" = 1 ] || [ "$STATUS" -eq {REQUEUE_EXIT_CODE} ]; }}; then',
        f'  if [ "${{SLURM_RESTART_COUNT:-0}}" -ge {config.max_requeues} ]; then',
        f'    echo "langadapt: not requeueing: already restarted {config.max_requeues} times" >&2',
        "  else",
        '    echo "langadapt: requeueing job $SLURM_JOB_ID to resume from its last checkpoint"',
        '    scontrol requeue "$SLURM_JOB_ID" && exit 0',
        "  fi",
        "fi",
        'exit "$STATUS"',
    ]


def write_sbatch(
    recipe_path: str | Path,
    preset: PresetName | ClusterPreset = "lumi-g",
    *,
    nodes: int = 1,
    gpus_per_node: int | None = None,
    time: str = "24:00:00",
    account: str | None = None,
    partition: str | None = None,
    out_path: str | Path | None = None,
    **options: object,
) -> Path:
    """Write the sbatch script for `recipe_path` and return its path.

    `options` are the other `SbatchConfig` fields (job_name, signal_seconds, max_requeues, setup,
    run_prefix, command, run_args, prepare, preparation, until, workdir, log_dir, env, extra_sbatch); an
    unknown one is a LangadaptError naming it. One self-contained script: without `preparation` it
    prepares in its own batch shell (a sweep's prepare.sbatch); `write_launch` writes the two jobs.
    Default `out_path`: `<recipe stem>.<preset>.sbatch` in the current directory. The log folder is
    created, since Slurm does not create it.
    """
    if not Path(recipe_path).is_file():
        raise LangadaptError(f"launch: recipe file {recipe_path} not found")
    config = build_config(preset=preset, nodes=nodes, gpus_per_node=gpus_per_node, time=time, account=account,
                          partition=partition, **options)
    text = render_sbatch(recipe_path, config)
    name = config.cluster().name
    out = Path(out_path) if out_path else Path.cwd() / f"{Path(recipe_path).stem}.{name}.sbatch"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.chmod(0o755)
    ((config.workdir or Path.cwd()) / config.log_dir).mkdir(parents=True, exist_ok=True)
    return out


def build_config(**fields: object) -> SbatchConfig:
    """SbatchConfig from keyword fields; validation errors become one-line LangadaptErrors."""
    from pydantic import ValidationError

    try:
        return SbatchConfig(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise LangadaptError(f"launch {where}: {err['msg']}") from None

