"""tokenizer stage."""
