"""Reading what users hand the toolkit before any stage runs: their model folders (`model_folder`:
weights from headers, parts against each other, the one tokenizer id count) and a base's
tokenizer.json (`tokenizer_json`: merges, vocabulary, what the tokenizers library refuses)."""
