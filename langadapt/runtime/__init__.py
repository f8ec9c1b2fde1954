"""Where and how this process runs: its place in the job (`placement`), the process group
(`distributed`), scheduler signals (`signals`), Slurm's host lists (`hostlist`) and the sbatch
scripts that start a job (`sbatch`: the training job; `launch`: a launch's preparation job and
submit.sh; `launch_options`: what one `langadapt launch` asks for).

Nothing is imported here, and `placement`, `signals`, `hostlist` and the launch modules import no torch:
the CLI, the logger and the pipeline read the placement before (or without) loading torch.
"""
