"""data stage: sources -> cleaned documents -> token shards -> a packed, resumable training stream.

- its settings are the recipe's `data` slice (`langadapt.recipe.data`: `DataConfig`, `SourceConfig`,
  `CleaningConfig`, `stream_mixture`); a training stage's mixture with its replay share is
  `langadapt.recipe.replay.stage_mixture`.
- `stage.run(slice_, ctx)`: read, clean, split held-out by hash, write `{train,valid}/<source>.jsonl.gz`.
- `shards.encode_corpus(tokenizer, data_dir, out_dir)`: memory-mapped token shards (all cores).
- `schedule`: Muennighoff effective data and `plan_mixture` (tokens and epochs per source).
- `stream.build_stream(tokens_dir, mixture, seq_len, total_samples, seed)`: the training stream.

Submodules are imported where used: importing this package stays cheap.
"""
