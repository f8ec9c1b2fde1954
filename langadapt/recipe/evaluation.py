"""The evaluation stage's slice of the recipe: which suites, how text is scored, what is compared."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from langadapt.recipe.base import Config

MAX_CONTEXT = 1_048_576
"""Upper bound of a token count of one sequence (as training's seq_len): past any model's context."""
DEVICE = re.compile(r"^(cpu|cuda|mps|xpu)(:\d+)?$")
"""The torch devices evaluation loads models on, as `torch.device` spells them, checked without importing torch."""


class GenerateOptions(Config):
    """How the `generate` task samples (prompts live in the suite, decoding knobs here)."""

    max_new_tokens: int = Field(40, ge=1, le=MAX_CONTEXT)
    """Tokens generated per prompt."""
    temperature: float = Field(0.8, ge=0)
    """Sampling temperature; 0 means greedy decoding."""
    top_p: float = Field(0.95, gt=0, le=1)
    """Nucleus sampling mass."""
    seed: int = 0
    """Seed set before each model's samples, so every model draws from the same random stream."""


DEFAULT_SUITES = ("eval/monolingual.yaml", "eval/multilingual.yaml")
"""The suites a recipe and `langadapt eval` run unless told otherwise: target-language and neighbours."""


class EvaluationConfig(Config):
    """Suites run on every model of a run (base, init, init_random, stage1, adapted) and compared.

    Held-out bits-per-byte follows lm-eval-harness (see `langadapt.evaluation.bpb`): with the
    default `window == stride == 512` the numbers equal lm-eval's rolling loglikelihood at
    `max_length=512`.
    """

    suites: list[str] = Field(default_factory=lambda: list(DEFAULT_SUITES))
    """Suite YAML files; relative paths resolve against the working directory, then the langadapt checkout."""
    window: int = Field(512, ge=2, le=MAX_CONTEXT)
    """Tokens the model sees per scoring window (capped at the model's context length)."""
    stride: int | None = Field(None, ge=1)
    """Tokens newly scored per window after the first; None = window (lm-eval's disjoint windows)."""
    batch_size: int | None = Field(None, ge=1)
    """Full-length windows per forward pass (shorter ones packed to the same tokens); lm-eval batch size.
    None = 8 on GPUs, 1 on CPU (faster there: cache)."""
    max_bytes_per_lang: int | None = Field(1_000_000, ge=1)
    """Cap on held-out UTF-8 bytes scored per language (whole documents, the last one cut); None = all."""
    compare: list[str] = Field(default_factory=list)
    """Extra run directories or Hugging Face model folders evaluated beside this run's models: `PATH`, named
    after the run and stage it came from, or `NAME=PATH`."""
    random_baseline: bool = True
    """Also score `init_random`: the same warm model with the rows transformers' resize_token_embeddings gives (method transformers_resize)."""
    cold_baseline: bool = False
    """Also train and score `cold`: this recipe from scratch at the warm run's FLOPs, in
    <run_root>/<name>_cold, kept like the demo's base model (langadapt.evaluation.cold_twin)."""
    device: str | None = None
    """Torch device (cpu, cuda, cuda:1, mps, xpu); None = cuda when available, else cpu."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype when loading models; auto = bfloat16 on GPU, float32 on CPU."""
    generate: GenerateOptions = Field(default_factory=GenerateOptions)
    """Decoding options of the `generate` task."""

    @field_validator("device")
    @classmethod
    def _torch_device(cls, device: str | None) -> str | None:
        """A typo (`cuda0`, `gpu`) fails here, at load, not when evaluate loads its first model."""
        if device is not None and not DEVICE.match(device):
            raise ValueError(f"{device!r} is not a torch device: use cpu, cuda, cuda:N, mps or xpu "
                             "(or leave it unset: cuda when available, else cpu)")
        return device

    @model_validator(mode="after")
    def _stride_fits(self) -> EvaluationConfig:
        if self.stride is not None and self.stride > self.window:
            raise ValueError(f"stride ({self.stride}) must not exceed window ({self.window})")
        return self

    @property
    def effective_stride(self) -> int:
        """The stride actually used: `stride`, or `window` when unset."""
        return self.stride if self.stride is not None else self.window
