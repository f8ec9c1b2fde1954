"""Running a recipe: the stage table and its runner (`runner`), and what is checked before any
work (`preflight`, `preflight_data`). It stands above every stage and the run contract
(`langadapt.run`) it hands them; only the CLI and the experiment drivers
(`langadapt.experiments`) stand above it."""
