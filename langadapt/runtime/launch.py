"""Slurm batch scripts for multi-node training: `langadapt launch RECIPE --slurm ...`.

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

Preparation is not the GPU job's business: `write_launch` writes a CPU job for data..embeddings
(`render_preparation_sbatch`: one node, every core, the recipe's `cluster.preparation`), the GPU
job, and `submit.sh`, which submits the GPU job with `--dependency=afterok:<preparation>`. Hours
of cleaning and tokenising then cost core-hours on a CPU node instead of holding every GPU of
the allocation idle (issue 37: ~40 hours for the headline recipe on one process). A recipe with
`data.engine: datatrove` and `data.datatrove.executor: slurm` prepares across many CPU nodes
instead: its submit.sh obtains the preparation's job id from datatrove's submission
(`datatrove_submit_command`: a cleaning array, then one job that merges and runs the tokenizer and
embeddings), and no prepare.sbatch is written.
"""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from langadapt.errors import LangadaptError
from langadapt.recipe.base import Config, FieldProblem
from langadapt.recipe.cluster import ClusterConfig, PreparationConfig, preparation_target, slurm_time_seconds
from langadapt.recipe.data import DatatroveConfig
from langadapt.runtime.hostlist import SLURM_PORT_BASE, SLURM_PORT_SPAN
from langadapt.runtime.presets import PRESETS, ClusterPreset, PresetName
from langadapt.runtime.signals import REQUEUE_EXIT_CODE

__all__ = ["CPU_PARTITIONS", "PRESETS", "ClusterPreset", "LaunchOptions", "LaunchScripts", "PreparationConfig",
           "SbatchConfig",
           "datatrove_on_slurm", "datatrove_submit_command", "preparation_command", "render_launch", "render_preparation_sbatch", "render_sbatch", "slurm_time_seconds",
           "write_launch", "write_sbatch"]

GPU_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "MIOPEN_", "CXI_", "FI_CXI_")
"""Preset variables for the GPU collectives and kernels, left out of the CPU preparation job."""
CPU_PARTITIONS: dict[str, str] = {"lumi-g": "standard"}
"""The CPU partition beside each preset's GPU nodes, for the preparation job (LUMI-C `standard`:
128-core nodes, whole nodes, 2 days). A preset not listed leaves it to `cluster.preparation.partition`
or the site's default partition (which is a CPU one on most sites)."""


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
    after = [(f"# Runs after the preparation job {_job_name(recipe, config)}-prepare{via} succeeded "
               "(its submit.sh submits both: --dependency=afterok).")] if config.prepare and config.preparation else []
    lines = ["#!/bin/bash", f"# langadapt training job, preset {cluster.name}: {recipe}", *after,
             "# Generated by `langadapt launch`; regenerate rather than edit, except the EDIT block.",
             *_directives(recipe, config, cluster, workdir), ""]
    lines += _setup_block(config, cluster)
    lines += _env_block(config, cluster)
    lines += _command_check(config)
    lines += _run_block(recipe, config, cluster)
    return "\n".join(lines) + "\n"


def _job_name(recipe: Path, config: SbatchConfig) -> str:
    return config.job_name or recipe.stem


def preparation_command(recipe: Path, config: SbatchConfig) -> list[str]:
    """The preparation job's work, as shell lines: the one place it is decided (the multi-node
    datatrove path replaces these lines, not the job around them). Today one process per node
    runs data..embeddings; the data stage's `num_workers` (None: every core this process may
    run on, i.e. the job's `--cpus-per-task`) spreads the work over the node."""
    extra = "".join(f" {shlex.quote(arg)}" for arg in config.run_args)
    return [f"$RUN_PREFIX {config.command} {shlex.quote(str(recipe))} --until embeddings{extra}"]


DATATROVE_PYTHON = "${LANGADAPT_PYTHON:-python3}"
"""The Python that runs datatrove's submission in submit.sh, on the login node, in the user's shell:
datatrove's jobs run the same interpreter (`data.datatrove.env_command` prepares their environment)."""


def datatrove_submit_command(recipe: Path, config: SbatchConfig) -> str:
    """submit.sh's preparation with `config.datatrove`: `python -m langadapt.data.datatrove_engine
    submit RECIPE --until embeddings [--set ...]`, which submits the cleaning array and the job that
    merges and runs tokenizer and embeddings (`submit_preparation`), and prints that last job's id.

    It runs in `workdir`, as the training job does (`--chdir`), so a relative `run_root` is the same
    folder for both. The run arguments come first; then what the one-node job takes from the launch
    and the recipe leaves unset: the preset's CPU partition and `--account` as `cluster.preparation`
    (`preparation_target`: the one source of the partition and account of every preparation job), and
    the job name, so the datatrove jobs are `<name>-clean` and `<name>-prepare` like the launch's."""
    assert config.preparation is not None and config.datatrove is not None
    try:
        target = preparation_target(config.preparation, config.datatrove)
    except FieldProblem as problem:  # a recipe validates this already; here for write_launch's callers
        raise LangadaptError(f"launch {'.'.join(map(str, problem.loc))}: {problem}") from None
    fallbacks = {"partition": CPU_PARTITIONS.get(config.cluster().name), "account": config.account}
    sets = [f"cluster.preparation.{key}={json.dumps(fallbacks[key])}"
            for key in ("partition", "account") if target[key] is None and fallbacks[key]]
    if config.datatrove.job_name is None:
        sets.append(f"data.datatrove.job_name={json.dumps(_job_name(recipe, config))}")
    args = [*config.run_args, *(part for item in sets for part in ("--set", item))]
    workdir = (config.workdir or Path.cwd()).resolve()
    command = [f'"{DATATROVE_PYTHON}"', "-m", "langadapt.data.datatrove_engine", "submit", shlex.quote(str(recipe)),
               "--until", "embeddings", *(shlex.quote(arg) for arg in args)]
    return f"cd {shlex.quote(str(workdir))} && {' '.join(command)}"


def render_preparation_sbatch(recipe_path: str | Path, config: SbatchConfig) -> str:
    """The CPU job that runs data..embeddings before the training job (`config.preparation`).

    One node, one task with every core it asks for; no GPU, no rendezvous, no requeue: a job cut
    by its time limit fails, the training job depending on it is cancelled with it
    (`--kill-on-invalid-dep`), and a resubmission skips the stages that completed."""
    if config.preparation is None:
        raise LangadaptError("launch: no preparation job configured (cluster.preparation)")
    cluster, recipe, prep = config.cluster(), Path(recipe_path).resolve(), config.preparation
    workdir = (config.workdir or Path.cwd()).resolve()
    opts = [f"--job-name={_job_name(recipe, config)}-prepare"]
    account = prep.account or config.account
    opts += [f"--account={account}"] if account else []
    partition = prep.partition or CPU_PARTITIONS.get(cluster.name)
    opts += [f"--partition={partition}"] if partition else []
    opts += ["--nodes=1", "--ntasks=1", f"--cpus-per-task={prep.cpus}", f"--mem={prep.mem or 0}",
             f"--time={prep.time}", f"--chdir={workdir}", f"--output={config.log_dir}/%x-%j.out"]
    # The preset's variables minus the GPU collectives' (no rank talks to another here); OpenMP
    # threads for the one process that uses them (the embeddings stage's torch): the data stage's
    # workers are processes, one per core.
    env = {key: value for key, value in {**cluster.env, **config.env}.items() if not key.startswith(GPU_ENV_PREFIXES)}
    env["OMP_NUM_THREADS"] = "${SLURM_CPUS_PER_TASK}"
    lines = ["#!/bin/bash", f"# langadapt preparation job (data, tokenizer, embeddings on CPU), preset {cluster.name}: {recipe}",
             "# Generated by `langadapt launch`; regenerate rather than edit, except the EDIT block.",
             *(f"#SBATCH {opt}" for opt in opts), ""]
    lines += _setup_block(config, cluster)
    lines += _exports(env, cluster.env_notes) + [""]
    lines += _command_check(config)
    started = 'echo "langadapt: preparation job $SLURM_JOB_ID: ${SLURM_CPUS_PER_TASK:-?} cores on $(hostname), $(date -Is)"'
    lines += [started, *preparation_command(recipe, config)]
    return "\n".join(lines) + "\n"


def _command_check(config: SbatchConfig) -> list[str]:
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
    opts = [f"--job-name={_job_name(recipe, config)}"]
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


def _setup_block(config: SbatchConfig, cluster: ClusterPreset) -> list[str]:
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
    return lines + _exports({**cluster.env, **config.env}, cluster.env_notes) + [""]


def _exports(env: dict[str, str], notes: dict[str, str]) -> list[str]:
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
    prepares in its own batch shell (a sweep's prepare.sbatch); `write_launch` writes the two jobs. Default `out_path`: `<recipe stem>.<preset>.sbatch` in the current
    directory. The log folder is created, since Slurm does not create it.
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


@dataclass(frozen=True)
class LaunchScripts:
    """The files of one launch: the CPU preparation job, the GPU training job, and the script that
    submits them in that order (the training job with `--dependency=afterok:<preparation>`)."""

    prepare: Path
    train: Path
    submit: Path

    def texts(self, recipe_path: str | Path, config: SbatchConfig) -> dict[Path, str]:
        """Each file's content, in submission order."""
        return {self.prepare: render_preparation_sbatch(recipe_path, config),
                self.train: render_sbatch(recipe_path, config), self.submit: _submit_script(self)}


def launch_paths(train: Path) -> LaunchScripts:
    """The preparation job and submit.sh beside the training script (`job.sbatch`:
    `job.prepare.sbatch`, `job.submit.sh`): `submit.sh` names them relative to its own folder."""
    stem = train.name.removesuffix(".sbatch")
    return LaunchScripts(prepare=train.with_name(f"{stem}.prepare.sbatch"), train=train,
                         submit=train.with_name(f"{stem}.submit.sh"))


def _submit_script(paths: LaunchScripts, datatrove: str | None = None) -> str:
    """submit.sh: the preparation job, then the training job once it ended successfully; a failed
    preparation cancels the training job (`--kill-on-invalid-dep`) instead of leaving it pending
    forever. `sbatch --parsable` prints `id[;cluster]`. `datatrove`: the command that submits the
    preparation on datatrove instead (`datatrove_submit_command`; it prints the last job's id)."""
    after = '--dependency="afterok:$prepare" --kill-on-invalid-dep=yes'
    lines = ["#!/bin/bash", "# Submit preparation (CPU) and training (GPU, after it). Written by `langadapt launch`.",
             "set -euo pipefail", 'cd "$(dirname "$0")"']
    if datatrove is None:
        lines += [f"prepare=$(sbatch --parsable {shlex.quote(paths.prepare.name)} | cut -d';' -f1)",
                  'echo "preparation: job $prepare"']
    else:  # datatrove logs to stderr; its stdout is the id alone, checked before training depends on it
        lines += ["# Preparation on datatrove over Slurm: a cleaning array, then one job that merges and runs the",
                  "# tokenizer and embeddings; run here, in this shell's Python (LANGADAPT_PYTHON, default python3).",
                  f"prepare=$({datatrove})",
                  ('case "$prepare" in ""|*[!0-9]*) echo "langadapt: the datatrove submission printed'
                   ' \'$prepare\', not a job id" >&2; exit 1;; esac'),
                  'echo "preparation: job $prepare (datatrove: cleaning array, then merge, tokenizer, embeddings)"']
    lines += [f"train=$(sbatch --parsable {after} {shlex.quote(paths.train.name)} | cut -d';' -f1)",
              'echo "training: job $train, after job $prepare succeeded (cancelled if it fails)"']
    return "\n".join(lines) + "\n"


def render_launch(recipe_path: str | Path, config: SbatchConfig, out_path: str | Path) -> dict[Path, str]:
    """What `write_launch` would write, path -> text, without writing it (`launch --dry-run`): the
    preparation job, the training job and submit.sh; with `prepare` False only the training job."""
    train = Path(out_path)
    if not (config.prepare and config.preparation):
        return {train: render_sbatch(recipe_path, config)}
    paths = launch_paths(train)
    if config.datatrove is not None:  # datatrove submits the preparation's jobs itself: no prepare.sbatch
        submit = _submit_script(paths, datatrove_submit_command(Path(recipe_path).resolve(), config))
        return {train: render_sbatch(recipe_path, config), paths.submit: submit}
    return paths.texts(recipe_path, config)


def write_launch(recipe_path: str | Path, out_path: str | Path, **fields: object) -> dict[Path, str]:
    """Write the launch's scripts (`render_launch`) and return them, path -> text, in submission
    order. `fields` are `SbatchConfig`'s; the default `preparation` is `cluster.preparation`'s
    defaults, so a preparation job is written unless `prepare` is False."""
    if not Path(recipe_path).is_file():
        raise LangadaptError(f"launch: recipe file {recipe_path} not found")
    fields.setdefault("preparation", PreparationConfig())
    config = build_config(**fields)
    return _write_files(render_launch(recipe_path, config, out_path), config)


def _write_files(files: dict[Path, str], config: SbatchConfig) -> dict[Path, str]:
    """Write each script, executable, and the log folder (Slurm would not create it)."""
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    ((config.workdir or Path.cwd()) / config.log_dir).mkdir(parents=True, exist_ok=True)
    return files


def build_config(**fields: object) -> SbatchConfig:
    """SbatchConfig from keyword fields; validation errors become one-line LangadaptErrors."""
    from pydantic import ValidationError

    try:
        return SbatchConfig(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise LangadaptError(f"launch {where}: {err['msg']}") from None


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


def datatrove_on_slurm(data: object) -> DatatroveConfig | None:
    """The recipe's `data.datatrove` when its preparation runs on datatrove over Slurm (`data.engine:
    datatrove`, `data.datatrove.executor: slurm`), else None. `data`: the recipe's DataConfig."""
    engine, settings = getattr(data, "engine", "local"), getattr(data, "datatrove", None)
    return settings if engine == "datatrove" and settings is not None and settings.executor == "slurm" else None


def launch_from_options(options: LaunchOptions, preparation: PreparationConfig, *,
                        datatrove: DatatroveConfig | None = None) -> dict[Path, str]:
    """One run's scripts from `options` -> `write_launch` (or, `options.dry_run`, `render_launch`:
    nothing written); `preparation` is the recipe's `cluster.preparation`, `datatrove` its
    `data.datatrove` when preparation runs there (`datatrove_on_slurm`)."""
    if options.steps is not None or options.warmup_steps is not None:
        raise LangadaptError("launch --steps/--warmup-steps: only with --sweep (a full run takes --set stage2.steps=N)")
    if not options.recipe.is_file():
        raise LangadaptError(f"launch: recipe file {options.recipe} not found")
    config = build_config(nodes=options.nodes, time=options.time or "24:00:00", job_name=options.job_name,
                          run_args=list(options.run_args), preparation=preparation, datatrove=datatrove,
                          **sbatch_options(options))
    out = options.out or Path.cwd() / f"{options.recipe.stem}.{config.cluster().name}.sbatch"
    files = render_launch(options.recipe, config, out)
    return files if options.dry_run else _write_files(files, config)
