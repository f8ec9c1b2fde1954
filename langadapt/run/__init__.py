"""The run folder's contract, which every stage shares: where every artifact lives (`layout`),
what a stage is handed (`context`) and reads of the recipe (`slices`), one writer per run
(`lock`), what makes a stage re-run (`fingerprint`, `contenthash`), which folder a recipe's run is
(`identity`), where the base model comes from (`base_model`) and the experiment trackers
(`trackers`). It imports no stage: the stages import it, and `langadapt.pipeline` above them
runs them."""
