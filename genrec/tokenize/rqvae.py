"""RQ-VAE (TIGER's semantic-ID tokenizer): an MLP auto-encoder whose latent is residual-quantised.

``x (B, D_in) -> encoder -> z (B, d) -> L levels of nearest-code quantisation of the residual -> z_q = sum of the
chosen codes -> decoder -> x_hat (B, D_in)``. Loss: ``||x_hat - x||^2 + sum_l (||sg(r_l) - e_l||^2 +
beta ||r_l - sg(e_l)||^2)`` with a straight-through gradient from ``z_q`` to ``z``. Codebooks start from residual
k-means on the initial latents; a code no item used during an epoch is reset to a random item's residual at its
level, so no level collapses onto a few codes.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from genrec.errors import UserError
from genrec.tokenize.kmeans import as_points
from genrec.tokenize.rkmeans import ResidualKMeans

log = logging.getLogger(__name__)


def mlp(dims: list[int]) -> nn.Sequential:
    """Linear layers ``dims[0] -> dims[1] -> ... -> dims[-1]`` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


@dataclass
class RQVAEOutput:
    """One forward pass over a batch of ``B`` items with ``L`` levels."""

    x_hat: torch.Tensor         # (B, D_in) reconstruction
    codes: torch.Tensor         # (B, L) int64
    residuals: torch.Tensor     # (B, L, d) what each level quantised (r_0 = z)
    recon_loss: torch.Tensor    # scalar: mean over the batch of ||x_hat - x||^2
    quant_loss: torch.Tensor    # scalar: codebook + beta * commitment, summed over levels


class RQVAE(nn.Module):
    """The network: ``encoder``, ``decoder`` (mirror image) and ``L`` codebooks ``(K_l, d)``.

    Args:
        input_dim: ``D_in``.
        hidden_dims: encoder widths between input and latent (the decoder uses them reversed).
        latent_dim: ``d``.
        codebook_sizes: ``K_l`` of each of the ``L`` levels.
        beta: commitment weight.
    """

    def __init__(self, input_dim: int, hidden_dims: tuple[int, ...] = (512, 256, 128), latent_dim: int = 32,
                 codebook_sizes: tuple[int, ...] = (256, 256, 256), beta: float = 0.25):
        super().__init__()
        self.encoder = mlp([input_dim, *hidden_dims, latent_dim])
        self.decoder = mlp([latent_dim, *reversed(hidden_dims), input_dim])
        self.codebooks = nn.ParameterList(nn.Parameter(torch.randn(k, latent_dim) * 0.01) for k in codebook_sizes)
        self.beta = beta

    def quantize(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``z (B, d)`` -> ``z_q (B, d)`` (straight-through), ``codes (B, L)``, ``residuals (B, L, d)``,
        quantisation loss (scalar)."""
        residual, total, loss = z, torch.zeros_like(z), z.new_zeros(())
        codes, residuals = [], []
        for codebook in self.codebooks:  # (K, d)
            distances = (residual.pow(2).sum(1, keepdim=True) - 2 * residual @ codebook.T
                         + codebook.pow(2).sum(1)[None, :])
            code = distances.argmin(dim=1)
            chosen = codebook[code]
            loss = loss + (residual.detach() - chosen).pow(2).sum(1).mean() \
                + self.beta * (residual - chosen.detach()).pow(2).sum(1).mean()
            codes.append(code)
            residuals.append(residual)
            total = total + chosen
            residual = residual - chosen.detach()
        z_q = z + (total - z).detach()
        return z_q, torch.stack(codes, 1), torch.stack(residuals, 1), loss

    def forward(self, x: torch.Tensor) -> RQVAEOutput:
        z_q, codes, residuals, quant_loss = self.quantize(self.encoder(x))
        x_hat = self.decoder(z_q)
        return RQVAEOutput(x_hat, codes, residuals, (x_hat - x).pow(2).sum(1).mean(), quant_loss)


class RQVAETokenizer:
    """Trains an :class:`RQVAE` on the catalogue's embeddings and encodes items to ``(N, L)`` codes.

    Args:
        num_levels / codebook_size: ``L`` levels of ``K`` codes each.
        first_codebook_size: ``K_0`` of the first level when it differs from ``K`` (``None``: ``K``): a larger
            first codebook leaves fewer items to share each first code.
        hidden_dims / latent_dim / beta: see :class:`RQVAE`.
        epochs: passes over the catalogue.
        batch_size: items per step.
        lr / weight_decay: AdamW.
        kmeans_init: start the codebooks from residual k-means on the initial latents.
        reset_dead_codes: after each epoch, reset codes no item used in that epoch to random items' residuals.
        device: torch device for training and encoding.
    """

    def __init__(self, num_levels: int = 3, codebook_size: int = 256, hidden_dims: tuple[int, ...] = (512, 256, 128),
                 latent_dim: int = 32, beta: float = 0.25, epochs: int = 300, batch_size: int = 1024,
                 lr: float = 1e-3, weight_decay: float = 0.0, kmeans_init: bool = True,
                 reset_dead_codes: bool = True, device: str = "cpu", first_codebook_size: int | None = None):
        if num_levels < 1 or codebook_size < 2 or epochs < 1:
            raise UserError(f"tokenizer.num_levels >= 1, tokenizer.codebook_size >= 2 and tokenizer.epochs >= 1 "
                            f"required, got {num_levels}, {codebook_size}, {epochs}")
        if first_codebook_size is not None and first_codebook_size < 2:
            raise UserError(f"tokenizer.first_codebook_size >= 2 required, got {first_codebook_size}")
        self.num_levels, self.codebook_size, self.first_codebook_size = num_levels, codebook_size, first_codebook_size
        #: ``K_l`` of every level
        self.codebook_sizes = [first_codebook_size or codebook_size] + [codebook_size] * (num_levels - 1)
        self.hidden_dims, self.latent_dim, self.beta = tuple(hidden_dims), latent_dim, beta
        self.epochs, self.batch_size, self.lr, self.weight_decay = epochs, batch_size, lr, weight_decay
        self.kmeans_init, self.reset_dead_codes, self.device = kmeans_init, reset_dead_codes, torch.device(device)
        self.model: RQVAE | None = None
        self.history: list[dict[str, float]] = []
        self.dead_codes_reset = 0
        self.train_seconds = 0.0
        self.latent_unexplained = float("nan")  # share of the latents' variance the quantised latents miss

    def fit(self, x: np.ndarray, seed: int = 0) -> "RQVAETokenizer":
        x_all = torch.from_numpy(as_points(x)).to(self.device)
        if len(x_all) < max(self.codebook_sizes):
            raise UserError(f"tokenizer: codebooks of {max(self.codebook_sizes)} codes exceed the {len(x_all)} items")
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        self.model = model = RQVAE(x_all.shape[1], self.hidden_dims, self.latent_dim, self.codebook_sizes,
                                   self.beta).to(self.device)
        if self.kmeans_init:
            with torch.no_grad():
                latents = model.encoder(x_all).cpu().numpy()
                init = ResidualKMeans(self.num_levels, self.codebook_size,
                                      first_codebook_size=self.first_codebook_size).fit(latents, seed=seed)
                for codebook, centroids in zip(model.codebooks, init.codebooks):
                    codebook.copy_(torch.from_numpy(centroids))
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        self.history, self.dead_codes_reset = [], 0
        started = time.time()
        for epoch in range(self.epochs):
            model.train()
            used = [torch.zeros(k, dtype=torch.bool, device=self.device) for k in self.codebook_sizes]
            totals = np.zeros(2)
            for batch in torch.randperm(len(x_all), generator=generator).split(self.batch_size):
                out = model(x_all[batch.to(self.device)])
                loss = out.recon_loss + out.quant_loss
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                for level, codes in enumerate(out.codes.T):
                    used[level][codes] = True
                totals += np.array([out.recon_loss.item(), out.quant_loss.item()]) * len(batch)
            dead = sum(int((~u).sum()) for u in used)
            if self.reset_dead_codes and dead:
                self._reset(x_all, [~u for u in used], generator)
                self.dead_codes_reset += dead
            self.history.append({"epoch": epoch, "recon_loss": totals[0] / len(x_all),
                                 "quant_loss": totals[1] / len(x_all), "dead_codes": dead})
        self.train_seconds = time.time() - started
        with torch.no_grad():
            model.eval()
            z = model.encoder(x_all)
            z_q = model.quantize(z)[0]
            self.latent_unexplained = float((z - z_q).pow(2).sum() / (z - z.mean(0)).pow(2).sum())
        log.info("RQ-VAE: %d epochs in %.1f s, final recon %.4f quant %.4f, %d dead codes reset in all",
                 self.epochs, self.train_seconds, self.history[-1]["recon_loss"], self.history[-1]["quant_loss"],
                 self.dead_codes_reset)
        return self

    @torch.no_grad()
    def _reset(self, x_all: torch.Tensor, dead: list[torch.Tensor], generator: torch.Generator) -> None:
        """Set each dead code (``dead``: one ``(K_l,)`` mask per level) to the residual of a random item at that
        level."""
        residuals = self._forward(x_all).residuals  # (N, L, d)
        for level in range(self.num_levels):
            codes = dead[level].nonzero()[:, 0]
            if len(codes):
                items = torch.randperm(len(x_all), generator=generator)[:len(codes)].to(self.device)
                self.model.codebooks[level][codes] = residuals[items, level]

    @torch.no_grad()
    def _forward(self, x: torch.Tensor) -> RQVAEOutput:
        if self.model is None:
            raise RuntimeError("RQVAETokenizer.fit must run before encoding")
        self.model.eval()
        return self.model(x)

    def _run(self, x: np.ndarray) -> RQVAEOutput:
        return self._forward(torch.from_numpy(as_points(x)).to(self.device))

    def encode(self, x: np.ndarray) -> np.ndarray:
        return self._run(x).codes.cpu().numpy()

    def reconstruct(self, x: np.ndarray) -> np.ndarray:
        return self._run(x).x_hat.cpu().numpy()

    def last_level_distances(self, x: np.ndarray) -> np.ndarray:
        residual = self._run(x).residuals[:, -1]  # (N, d)
        return torch.cdist(residual, self.model.codebooks[-1].detach()).pow(2).cpu().numpy()

    def describe(self) -> dict[str, Any]:
        last = self.history[-1] if self.history else {}
        return {"method": "rqvae", "num_levels": self.num_levels, "codebook_size": self.codebook_size,
                "first_codebook_size": self.first_codebook_size,
                "hidden_dims": list(self.hidden_dims), "latent_dim": self.latent_dim, "beta": self.beta,
                "epochs": self.epochs, "batch_size": self.batch_size, "lr": self.lr,
                "weight_decay": self.weight_decay, "kmeans_init": self.kmeans_init,
                "reset_dead_codes": self.reset_dead_codes, "dead_codes_reset": self.dead_codes_reset,
                "final_recon_loss": last.get("recon_loss"), "final_quant_loss": last.get("quant_loss"),
                "latent_unexplained_variance": round(self.latent_unexplained, 6),
                "train_seconds": round(self.train_seconds, 1)}
