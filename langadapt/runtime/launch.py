"""A launch's files: `langadapt launch RECIPE --slurm ...` writes a CPU preparation job, the GPU
training job (`runtime.sbatch`) and `submit.sh`, which submits them in that order.

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

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from langadapt.errors import LangadaptError
from langadapt.recipe.base import FieldProblem
from langadapt.recipe.cluster import PreparationConfig, preparation_target
from langadapt.recipe.data import DatatroveConfig
from langadapt.runtime.launch_options import LaunchOptions, sbatch_options
from langadapt.runtime.sbatch import (
    SbatchConfig,
    build_config,
    command_check,
    export_lines,
    job_name,
    render_sbatch,
    setup_block,
)

__all__ = ["CPU_PARTITIONS", "LaunchScripts", "datatrove_on_slurm", "datatrove_submit_command", "launch_from_options",
           "preparation_command", "render_launch", "render_preparation_sbatch", "write_launch"]

GPU_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "MIOPEN_", "CXI_", "FI_CXI_")
"""Preset variables for the GPU collectives and kernels, left out of the CPU preparation job."""
CPU_PARTITIONS: dict[str, str] = {"lumi-g": "standard"}
"""The CPU partition beside each preset's GPU nodes, for the preparation job (LUMI-C `standard`:
128-core nodes, whole nodes, 2 days). A preset not listed leaves it to `cluster.preparation.partition`
or the site's default partition (which is a CPU one on most sites)."""



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
    """submit.sh's preparation with `config.datatrove`: `python -m langadapt.cli launch RECIPE --slurm
    --submit-preparation --until embeddings [--set ...]`, which submits the cleaning array and the job
    that merges and runs tokenizer and embeddings (`cli.datatrove_slurm.submit_preparation`), and
    prints that last job's id.

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
        sets.append(f"data.datatrove.job_name={json.dumps(job_name(recipe, config))}")
    args = [*config.run_args, *(part for item in sets for part in ("--set", item))]
    workdir = (config.workdir or Path.cwd()).resolve()
    command = [f'"{DATATROVE_PYTHON}"', "-m", "langadapt.cli", "launch", shlex.quote(str(recipe)), "--slurm",
               "--submit-preparation", "--until", "embeddings", *(shlex.quote(arg) for arg in args)]
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
    opts = [f"--job-name={job_name(recipe, config)}-prepare"]
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
    lines += setup_block(config, cluster)
    lines += export_lines(env, cluster.env_notes) + [""]
    lines += command_check(config)
    started = 'echo "langadapt: preparation job $SLURM_JOB_ID: ${SLURM_CPUS_PER_TASK:-?} cores on $(hostname), $(date -Is)"'
    lines += [started, *preparation_command(recipe, config)]
    return "\n".join(lines) + "\n"



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
