"""Running a recipe: the pipeline of stages (`pipeline`), what a stage is handed (`context`), where
every artifact lives (`layout`), one writer per run (`lock`), what makes a stage re-run
(`fingerprint`, `contenthash`), what is checked before any work (`preflight`, `preflight_data`)
and where the base model comes from (`base_model`)."""
