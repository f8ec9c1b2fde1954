"""The two training stages: one loop (`loop.fit`), parameterised by which parameters train
(`policy`) and which LR schedule runs (`lr`), over a torch, DeepSpeed or FSDP2 engine (`engines/`,
one `Engine` interface), with atomic resumable checkpoints (`checkpoint`), and what a run reports
while it runs (`monitoring/`: metrics and MFU, loggers, energy, validation; `flops`). `stage.run`
is the pipeline's entry point; process placement, the process group, stop signals (requeue) and
sbatch scripts live in `langadapt.runtime`.

Nothing is imported here. Its settings are the recipe's (`langadapt.recipe.train`), which
`langadapt plan` reads without importing torch.
"""
