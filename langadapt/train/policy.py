"""Which parameters train, and which of them get weight decay.

A frozen parameter gets `requires_grad=False` AND is left out of the optimizer. Both matter:
AdamW's decoupled weight decay shrinks every parameter it holds even when its gradient is
None or zero in some implementations, so a "frozen" tensor that sits in the optimizer still
drifts. Only the selected tensors are ever given to an optimizer (torch or DeepSpeed).

Patterns are globs over `model.named_parameters()` names (`*embed_tokens.weight`), or regular
expressions with a `re:` prefix (`re:model\\.layers\\.(2[4-9]|3\\d)\\.`), or the single word
`all`. Matching nothing is an error, since a typo would otherwise train nothing at all.

Weight decay: matrices decay, vectors (norm scales, biases) do not, as in GPT-2/nanoGPT.
Embedding and LM-head matrices decay too by default (Megatron, NorMistral); set
`optimizer.decay_embeddings: false` to exempt them (OLMo's choice).
"""

from __future__ import annotations

import fnmatch
import logging
import re
from dataclasses import dataclass

import torch

from langadapt.errors import LangadaptError
from langadapt.recipe.train import OptimizerConfig

log = logging.getLogger("langadapt.train")


@dataclass(frozen=True)
class TrainableParams:
    """The outcome of a selection: trainable (name, parameter) pairs and the frozen names."""

    named: list[tuple[str, torch.nn.Parameter]]
    frozen: list[str]
    embedding_names: frozenset[str]

    @property
    def params(self) -> list[torch.nn.Parameter]:
        """The trainable tensors, in model order (what the optimizer receives)."""
        return [p for _, p in self.named]


def _matches(pattern: str, name: str) -> bool:
    if pattern.startswith("re:"):
        return re.search(pattern[3:], name) is not None
    return fnmatch.fnmatchcase(name, pattern)


def numel(param: torch.nn.Parameter) -> int:
    """Element count, also for ZeRO-3 partitioned parameters (whose local shape is [0])."""
    return int(getattr(param, "ds_numel", param.numel()))


def embedding_param_names(model: torch.nn.Module) -> frozenset[str]:
    """Names of the input-embedding and output-head weights, whatever the model family."""
    ids = set()
    for get in ("get_input_embeddings", "get_output_embeddings"):
        module = getattr(model, get, lambda: None)()
        if module is not None and getattr(module, "weight", None) is not None:
            ids.add(id(module.weight))
    return frozenset(n for n, p in model.named_parameters() if id(p) in ids)


def select_trainable(model: torch.nn.Module, patterns: list[str], key: str = "trainable") -> TrainableParams:
    """Set requires_grad by pattern and return the selection; `key` names the recipe field."""
    bad = [p for p in patterns if p.startswith("re:") and not _valid_regex(p[3:])]
    if bad:
        raise LangadaptError(f"{key}: invalid regular expression {bad[0]!r}")
    named, frozen = [], []
    for name, param in model.named_parameters():
        train = patterns == ["all"] or any(_matches(p, name) for p in patterns)
        param.requires_grad_(train)
        (named.append((name, param)) if train else frozen.append(name))
    if not named:
        raise LangadaptError(
            f"{key}: patterns {patterns} match no parameter of {type(model).__name__} "
            f"(names look like {next(iter(dict(model.named_parameters())), '?')!r})"
        )
    embeddings = embedding_param_names(model)
    if patterns != ["all"] and not embeddings <= {n for n, _ in named}:
        log.warning("%s: the embedding/head weights %s are not all trainable", key, sorted(embeddings))
    n_train = sum(numel(p) for _, p in named)
    n_all = sum(numel(p) for p in model.parameters())
    log.info("trainable: %d tensors, %.2fM of %.2fM parameters", len(named), n_train / 1e6, n_all / 1e6)
    return TrainableParams(named, frozen, embeddings)


def _valid_regex(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def param_groups(selection: TrainableParams, optimizer: OptimizerConfig) -> list[dict]:
    """AdamW groups over the trainable tensors only: decayed matrices and the undecayed rest, each
    split into embedding/head rows and body when `body_lr_scale` makes their learning rates differ.

    Each group carries `lr_scale`, its fraction of the scheduled LR (`set_learning_rate`)."""
    groups: dict[tuple[bool, float], list] = {}
    for name, param in selection.named:
        is_matrix = len(getattr(param, "ds_shape", param.shape)) >= 2
        is_embedding = name in selection.embedding_names
        decayed = is_matrix and not (is_embedding and not optimizer.decay_embeddings)
        scale = 1.0 if is_embedding else optimizer.body_lr_scale
        groups.setdefault((decayed, scale), []).append(param)
    order = sorted(groups, key=lambda key: (not key[0], -key[1]))  # decayed first, then by scale
    return [{"params": groups[key], "weight_decay": optimizer.weight_decay if key[0] else 0.0, "lr_scale": key[1]}
            for key in order]


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The scheduled LR into every group, times the group's `lr_scale` (1 where none): the one place
    every engine sets it, so a group's fraction is kept whatever wraps the optimizer."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
