"""langadapt: adapt a pretrained LLM to a low-resource language by continual pretraining."""

__version__ = "0.1.0"
