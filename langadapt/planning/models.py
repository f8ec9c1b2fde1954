"""Model dimensions for planning, from a local config.json or a built-in table, offline.

`langadapt plan` must run on a login node with no network and no weights, so a model is only its
shape. The parameter count is exact for Llama-style decoders (Llama, Mistral, Qwen2, Gemma-2,
OLMo-2): it is checked in the tests against transformers' own models built on the meta device.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from langadapt.errors import LangadaptError
from langadapt.inputs.text import read_input_json

_CONFIG_KEYS = {"hidden": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads",
                "kv_heads": "num_key_value_heads", "ffn": "intermediate_size", "vocab": "vocab_size",
                "head_dim": "head_dim"}
"""ModelDims field -> the Hugging Face config key it is read from."""


@dataclass(frozen=True)
class ModelDims:
    """The shape of a Llama-style decoder: enough to count parameters, FLOPs and memory."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tied: bool = False
    head_dim: int | None = None  # None: hidden // heads (Gemma-2 and Mistral-Nemo differ)
    norms_per_layer: int = 2  # RMSNorm weight vectors per block; Gemma-2 has 4 (pre and post)
    qkv_bias: bool = False  # Qwen2 has biases on the q, k, v projections
    qk_norm: Literal["none", "full", "per_head"] = "none"  # OLMo-2: full width; Qwen3: per head

    def __post_init__(self) -> None:
        """Every plan, memory estimate and FLOPs count goes through here: a shape that is not a
        positive whole number (`hidden_size: wide` in an architecture, a float in a config.json)
        is one line naming the config key, not a TypeError deep in the arithmetic."""
        for field, key in _CONFIG_KEYS.items():
            value = getattr(self, field)
            if field == "head_dim" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LangadaptError(f"{self.name}: {key} must be a positive whole number (got {str(value)[:40]!r})")

    @property
    def attn_dim(self) -> int:
        """Width of the attention heads together (heads x head_dim)."""
        return self.heads * (self.head_dim or self.hidden // self.heads)

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: kv_heads x head_dim."""
        return self.kv_heads * (self.head_dim or self.hidden // self.heads)

    def layer_params(self) -> int:
        """Parameters of one transformer block."""
        attn = self.hidden * self.attn_dim * 2 + self.hidden * self.kv_dim * 2  # q, o; k, v
        if self.qkv_bias:
            attn += self.attn_dim + 2 * self.kv_dim
        if self.qk_norm == "full":
            attn += self.attn_dim + self.kv_dim
        elif self.qk_norm == "per_head":
            attn += 2 * (self.head_dim or self.hidden // self.heads)
        mlp = 3 * self.hidden * self.ffn  # gated MLP (SwiGLU / GeGLU): gate, up, down
        return attn + mlp + self.norms_per_layer * self.hidden

    def embedding_params(self) -> int:
        """Input embedding matrix plus the LM head (counted once when tied): what stage 1 trains."""
        return self.vocab * self.hidden * (1 if self.tied else 2)

    def body_params(self) -> int:
        """Everything but the embeddings and head: the blocks and the final norm (frozen in stage 1)."""
        return self.layers * self.layer_params() + self.hidden

    def num_params(self) -> int:
        """All parameters, as `sum(p.numel() for p in model.parameters())` counts them."""
        return self.body_params() + self.embedding_params()

    def with_vocab(self, vocab: int) -> ModelDims:
        """The same model after vocabulary surgery (a new tokenizer of `vocab` tokens)."""
        return ModelDims(**{**asdict(self), "vocab": vocab})


# From each model's config.json on the Hugging Face Hub.
BUILTIN: dict[str, ModelDims] = {
    d.name.lower(): d
    for d in [
        ModelDims("Mistral-7B-v0.1", 4096, 32, 32, 8, 14336, 32000),
        ModelDims("Llama-2-7B", 4096, 32, 32, 32, 11008, 32000),
        ModelDims("Llama-3-8B", 4096, 32, 32, 8, 14336, 128256),
        ModelDims("Llama-3.1-70B", 8192, 80, 64, 8, 28672, 128256),
        ModelDims("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, qkv_bias=True),
        ModelDims("Gemma-2-9B", 3584, 42, 16, 8, 14336, 256000, tied=True, head_dim=256, norms_per_layer=4),
        ModelDims("OLMo-2-7B", 4096, 32, 32, 32, 11008, 100352, qk_norm="full"),
        ModelDims("Mistral-Nemo-12B", 5120, 40, 32, 8, 14336, 131072, head_dim=128),
        # NorMistral-11B: the Mistral-Nemo body with the new 51,200-token Norwegian tokenizer.
        ModelDims("NorMistral-11B", 5120, 40, 32, 8, 14336, 51200, head_dim=128),
        # NorMistral-7B-warm: Mistral-7B with the new 32,768-token tokenizer.
        ModelDims("NorMistral-7B", 4096, 32, 32, 8, 14336, 32768),
        # The demo's stand-in English base model (../shared/models/tiny-en-llama): 8.6M params.
        ModelDims("tiny-en-llama", 256, 6, 8, 4, 704, 8192, head_dim=32),
    ]
}
ALIASES = {
    "mistralai/mistral-7b-v0.1": "mistral-7b-v0.1",
    "meta-llama/llama-2-7b-hf": "llama-2-7b",
    "meta-llama/meta-llama-3-8b": "llama-3-8b",
    "meta-llama/llama-3.1-70b": "llama-3.1-70b",
    "qwen/qwen2.5-7b": "qwen2.5-7b",
    "google/gemma-2-9b": "gemma-2-9b",
    "allenai/olmo-2-1124-7b": "olmo-2-7b",
    "mistralai/mistral-nemo-base-2407": "mistral-nemo-12b",
    "norallm/normistral-11b-warm": "normistral-11b",
    "norallm/normistral-7b-warm": "normistral-7b",
}
_TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3_text", "gpt2"}  # their configs default to tied
_QK_NORM = {"olmo2": "full", "qwen3": "per_head"}


SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
"""What `dims_from_config` needs of an architecture (the position check skips a missing length)."""


def complete_architecture(architecture: dict) -> dict:
    """A recipe's `base_model.architecture` with transformers' defaults for the shape keys it leaves
    out, as the model built from it (`AutoConfig.for_model`) will have them; `vocab_size` stays the
    tokenizer's. transformers (and torch with it, seconds) is imported only when a key is missing."""
    model_type = architecture.get("model_type")
    if not model_type or all(key in architecture for key in SHAPE_KEYS):
        return architecture
    from transformers import AutoConfig

    try:
        defaults = AutoConfig.for_model(model_type).to_dict()
    except ValueError:  # an unknown model_type: the scratch stage's check names it
        return architecture
    return {**{key: defaults[key] for key in SHAPE_KEYS if key in defaults}, **architecture}


def architecture_config(architecture: dict) -> Any:
    """The transformers config that a recipe's `base_model.architecture` builds (`init: scratch`),
    or one error line keyed `base_model.architecture...`: an unknown model type (with the closest
    known ones, not transformers' list of hundreds) or fields the model type refuses (a hidden
    size the heads do not divide, a string where a number belongs). The preflight check and the
    scratch stage both build through here, so a recipe `--dry-run` calls valid builds."""
    import difflib

    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    fields = dict(architecture)
    model_type = fields.pop("model_type", None)
    if not model_type:
        raise LangadaptError.at("base_model.architecture.model_type", "required for init: scratch (e.g. llama)")
    if model_type not in CONFIG_MAPPING:
        close = difflib.get_close_matches(str(model_type), list(CONFIG_MAPPING.keys()), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else "e.g. llama, mistral, qwen2, gpt2"
        raise LangadaptError.at("base_model.architecture.model_type", f"{str(model_type)[:60]!r} is not a model type "
                                f"the installed transformers knows ({hint})")
    try:
        return AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # ValueError, TypeError, huggingface_hub's StrictDataclassError (an Exception)
        reason = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else type(exc).__name__
        for prefix in ("ValueError: ", "TypeError: "):
            reason = reason.removeprefix(prefix)
        raise LangadaptError.at("base_model.architecture",
                                f"{model_type} refuses these fields: {reason[:300]}") from None


def ties_embeddings(config: dict) -> bool:
    """Whether a config.json ties the LM head to the input embeddings: its field, else the default of
    its model type's config class (transformers reads it so)."""
    return bool(config.get("tie_word_embeddings", config.get("model_type", "") in _TIED_BY_DEFAULT))


def dims_from_config(config: dict, name: str = "model") -> ModelDims:
    """ModelDims from a Hugging Face config.json dict (Llama-style decoders)."""
    try:
        model_type = config.get("model_type", "")
        heads = config["num_attention_heads"]
        return ModelDims(
            name=name,
            hidden=config["hidden_size"],
            layers=config["num_hidden_layers"],
            heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            ffn=config["intermediate_size"],
            vocab=config["vocab_size"],
            tied=ties_embeddings(config),
            head_dim=config.get("head_dim"),
            norms_per_layer=4 if model_type.startswith(("gemma2", "gemma3")) else 2,
            qkv_bias=model_type == "qwen2" or bool(config.get("attention_bias", False)),
            qk_norm=_QK_NORM.get(model_type, "none"),  # type: ignore[arg-type]
        )
    except KeyError as exc:
        raise LangadaptError(
            f"{name}: config.json has no {exc.args[0]!r}; is it a decoder LM config?"
        ) from exc


def load_model_dims(model: str | Path) -> ModelDims:
    """Dims of a model given as a local folder / config.json path, a table name or a Hub id."""
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise LangadaptError(f"{path}: config.json not found")
        config = read_input_json(path, "model config")
        return dims_from_config(config, name=path.parent.name or str(path))
    key = ALIASES.get(str(model).lower(), str(model).lower())
    if key in BUILTIN:
        return BUILTIN[key]
    known = ", ".join(d.name for d in BUILTIN.values())
    raise LangadaptError(
        f"model {model!r}: no local config.json there and not in the built-in table ({known}); "
        "point it at a folder holding the model's config.json"
    )
