"""Replay distillation: on the replay samples, keep the model's next-token distribution close to the
starting model's (`TrainStageConfig.replay_distillation`).

Replay alone teaches English back through one label per token; the starting model's whole
distribution over the base's tokens carries far more of what the base knew per replayed token (the
learning-without-forgetting idea, Li & Hoiem 2016, applied to continual pretraining's replay). On
the demo's extension at 20% replay it took English from +6.6% to +1.5% against the base at the
same Bokmål (benchmarks/README.md frontier, session 22).

The teacher is the embeddings stage's model: the base's body with the new vocabulary's rows, so it
reads the same token ids as the model in training. Its head rows that the embeddings stage made up
(new tokens) would teach the student its own guesses, so its distribution is taken over the rows
copied from the base only (`SharedRows`): on the extension, exactly the base model's own prediction.
Written here because transformers and torch have no KL-to-a-frozen-model loss for causal LM
training (TRL's GKD trainer distils whole fine-tuning datasets, not a share of a pretraining stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F


def token_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) per position, in nats: [..., V] logits -> [...].

    The teacher's distribution is its softmax over the `kept` token ids only (bool [V]; the others
    get probability 0, so they add nothing); the student's is its full softmax, so probability it
    puts on the other ids counts as lost (the term pushes it back onto the kept ones)."""
    teacher = F.log_softmax(teacher_logits.float().masked_fill(~kept, float("-inf")), dim=-1)
    student = F.log_softmax(student_logits.float(), dim=-1)
    return (teacher.exp() * (teacher - student)).masked_fill(~kept, 0.0).sum(-1)


@dataclass
class ReplayDistillation:
    """The frozen teacher, which of its head rows count, and the term's weight.

    Held by `fastpath.CausalLMLoss` as a plain attribute (this is not an nn.Module), so the teacher's
    weights are never parameters of the trained module: DDP, DeepSpeed and FSDP neither shard, sync
    nor save them. Each rank holds the whole teacher (a 7B teacher in bf16: 14 GB per GPU)."""

    teacher: torch.nn.Module
    kept: torch.Tensor
    """bool [V]: the token ids whose head rows came from the base."""
    weight: float

    @classmethod
    def load(cls, teacher_dir: Path, kept_ids: tuple[int, ...], weight: float, *, dtype: torch.dtype,
             attn_implementation: str | None = None) -> ReplayDistillation:
        """The teacher from `teacher_dir`, with the attention the trained model uses (the loss hands
        it the same forward arguments)."""
        from transformers import AutoModelForCausalLM

        teacher = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=dtype, attn_implementation=attn_implementation)
        teacher.eval().requires_grad_(False)
        vocab = teacher.get_output_embeddings().weight.shape[0]
        kept = torch.zeros(vocab, dtype=torch.bool)
        kept[list(kept_ids)] = True
        return cls(teacher, kept, weight)

    def loss(self, logits: torch.Tensor, model_kwargs: dict, rows: torch.Tensor) -> torch.Tensor:
        """`weight` x the KL summed over the `rows` (bool [batch]) and divided by every token of the
        micro-batch: the same mean as the cross-entropy's, so `weight` is per replayed token.

        `logits` are the student's on the whole micro-batch; the teacher gets the same forward
        arguments (`fastpath.model_inputs`), cut to the distilled rows."""
        if self.teacher.device != logits.device:  # moved once, after the engine placed the model
            self.teacher.to(logits.device)
            self.kept = self.kept.to(logits.device)
        rows = rows.to(logits.device)
        batch, vocab = rows.shape[0], logits.shape[-1]
        length = logits.shape[:-1].numel() // batch
        # flash-attention's kwargs are one flattened row (fastpath.model_inputs): the teacher then runs on
        # the whole micro-batch and its logits are cut to the rows after; otherwise it runs on the rows.
        flat = model_kwargs["input_ids"].shape[0] != batch
        teacher_kwargs = model_kwargs if flat else model_kwargs | {
            k: model_kwargs[k][rows] for k in ("input_ids", "position_ids") if k in model_kwargs}
        with torch.no_grad():
            teacher_logits = self.teacher(**teacher_kwargs).logits.reshape(-1, length, vocab)
        if flat:
            teacher_logits = teacher_logits[rows]
        student = logits.reshape(batch, length, vocab)[rows]
        return self.weight * token_kl(student, teacher_logits, self.kept).sum() / (batch * length)
