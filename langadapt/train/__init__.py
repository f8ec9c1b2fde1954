"""The two training stages: one loop (`loop.fit`), parameterised by which parameters train
(`policy`) and which LR schedule runs (`lr`), over a torch or DeepSpeed engine (`engine`,
`ds_engine`), with atomic resumable checkpoints (`checkpoint`), metrics and MFU (`metrics`,
`flops`) and requeue on SIGTERM/SIGUSR1 (`signals`). `stage.run` is the pipeline's entry point;
`distributed` and `launch` place processes and write sbatch scripts.

Nothing is imported here: `langadapt plan` reads the configs without importing torch.
"""
