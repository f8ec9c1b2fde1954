"""Where and how this process runs: its place in the job (`placement`), the process group
(`distributed`), scheduler signals (`signals`), Slurm's host lists (`hostlist`) and the sbatch
scripts that start a job (`launch`).

Nothing is imported here, and `placement`, `signals`, `hostlist` and `launch` import no torch:
the CLI, the logger and the pipeline read the placement before (or without) loading torch.
"""
