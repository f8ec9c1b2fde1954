"""Random rows for a new embedding matrix: the three distributions the methods draw from.

- `sample_like`: N(mean, cov) of the old rows, full covariance (Hewitt 2021's proposal as
  written): rows spread like real ones, so a new token looks like *some* token. `random_full_cov`
  and FOCUS's rare tokens (`focus_rare: random`) use it.
- `sample_resized`: what transformers' `resize_token_embeddings` gives added rows by default
  since 4.46 (`mean_resizing=True`, `PreTrainedModel._init_added_embeddings_weights_with_mean`):
  N(mean, 1e-9 * cov), the covariance taken over the old rows with 1/N, in float32; when that
  matrix is not positive definite (Cholesky fails) every added row is the mean row itself. The
  1e-9 makes the draws the mean row plus noise of about 3e-5 standard deviations: in effect the
  mean init. This is what a user gets without this tool, so the `transformers_resize` baseline
  reproduces it exactly instead of guessing.
- `sample_initializer`: N(0, std^2) per entry, std = the config's `initializer_range`: the
  model's own `_init_weights` for an Embedding/Linear (`mean_resizing=False`, or a model built
  from its config).

All draw their standard normals from the given CPU generator whatever the matrix's device, so a
GPU run draws the same rows as a CPU run.
"""

from __future__ import annotations

import torch

RESIZE_EPSILON = 1e-9
"""transformers' scale on the old rows' covariance (`_init_added_embeddings_weights_with_mean`)."""


def _normals(n: int, dim: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    return torch.randn(n, dim, generator=generator).to(device)


def sample_like(matrix: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n rows drawn from N(mean, cov) of `matrix`'s rows (Hewitt 2021), float32.

    A Cholesky factor of the covariance (float64), with a tiny diagonal jitter added only when
    the covariance is singular (fewer rows than dimensions, a constant column).
    """
    x = matrix.float()
    mean = x.mean(0)
    centred = x - mean
    cov = (centred.T @ centred).double() / max(x.shape[0] - 1, 1)
    jitter = 0.0
    scale = float(cov.diagonal().mean().clamp(min=1e-12))
    while True:
        eye = torch.eye(cov.shape[0], dtype=cov.dtype, device=cov.device)
        factor, info = torch.linalg.cholesky_ex(cov + jitter * eye)
        if int(info) == 0:
            break
        jitter = max(jitter * 10, scale * 1e-10)
    return mean + _normals(n, x.shape[1], generator, x.device) @ factor.float().T


def sample_resized(matrix: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n rows as transformers' `resize_token_embeddings` draws added rows (module docstring), float32.

    Same float32 arithmetic as transformers (mean, 1/N covariance, the 1e-9 scale, the positive
    definiteness test by Cholesky); only the source of the standard normals differs (our
    generator instead of the global one), so with the same normals the rows are the same.
    """
    x = matrix.float()
    mean = x.mean(0)
    centred = x - mean
    covariance = RESIZE_EPSILON * (centred.T @ centred / x.shape[0])
    factor, info = torch.linalg.cholesky_ex(covariance)
    symmetric = torch.isclose(covariance, covariance.T, atol=1e-6).all()
    if not bool(symmetric) or int(info) != 0:
        return mean.expand(n, -1).clone()  # transformers' fallback: no distribution, the mean row
    return mean + _normals(n, x.shape[1], generator, x.device) @ factor.T


def sample_initializer(matrix: torch.Tensor, n: int, generator: torch.Generator, std: float) -> torch.Tensor:
    """n rows with independent N(0, std^2) entries (the model's own initializer), float32."""
    return _normals(n, matrix.shape[1], generator, matrix.device) * std
