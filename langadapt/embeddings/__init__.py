"""Embeddings stage: map the old vocabulary onto the new one and initialise the new rows.

Library use: `transfer_embeddings(model, old_tokenizer, new_tokenizer, EmbeddingConfig())`;
`build_mapping` alone inspects how a new vocabulary decomposes into the old one.
"""

from langadapt.embeddings.config import EmbeddingConfig
from langadapt.embeddings.mapping import VocabMapping, build_mapping
from langadapt.embeddings.transfer import transfer_embeddings

__all__ = ["EmbeddingConfig", "VocabMapping", "build_mapping", "transfer_embeddings"]
