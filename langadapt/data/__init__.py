"""data stage: sources -> cleaned documents -> token shards -> a packed, resumable training stream.

- `config`: `DataConfig` / `SourceConfig` / `CleaningConfig` (the recipe's `data` slice),
  `stream_mixture(config)` for the stream.
- `replay.stage_mixture(config, stage_name, stage)`: a training stage's mixture with its replay share
  (`data.replay` / `stageN.replay`) turned into weights by `replay.replay_mixture`.
- `stage.run(slice_, ctx)`: read, clean, split held-out by hash, write `{train,valid}/<source>.jsonl.gz`.
- `shards.encode_corpus(tokenizer, data_dir, out_dir)`: memory-mapped token shards (all cores).
- `schedule`: Muennighoff effective data and `plan_mixture` (tokens and epochs per source).
- `stream.build_stream(tokens_dir, mixture, seq_len, total_samples, seed)`: the training stream.

Submodules are imported where used: importing this package stays cheap.
"""
