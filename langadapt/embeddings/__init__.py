"""embeddings stage."""
