"""K reward criteria scored from one batch of image embeddings.

Each criterion's formula (``reward/formulas.py``) computes its text side once. Where every formula has a
row in the fused kernel's criterion table and a kernel runs on the device (the C++ twin on the CPU, the
CUDA kernel on a GPU whose core was built with CUDA), one kernel pass normalizes each image
embedding and evaluates every criterion in O(D); otherwise the formulas run in torch, on either device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from vlmrm_fast.reward.formulas import formula_of, normalize
from vlmrm_fast.reward.kinds import Criterion
from vlmrm_fast.runtime import kernels
from vlmrm_fast.runtime.device import resolve_device


class RewardHead:
    """The formulas of ``criteria`` and the kernel that applies them."""

    def __init__(
        self,
        criteria: Sequence[Criterion],
        text_embedding: Callable[[str], torch.Tensor],
        logit_scale: float,
        device: torch.device,
    ):
        """``text_embedding(prompt)`` returns the normalized (D,) float32 embedding."""
        self.criteria = tuple(criteria)
        self.device = resolve_device(device)  # "cuda" -> "cuda:N": the kernel needs the index
        self.formulas = [formula_of(criterion, text_embedding, logit_scale) for criterion in self.criteria]
        rows: list[torch.Tensor] = []
        self.table: list | None = []  # the kernel's criterion table; None: a formula the kernel does not know
        for formula in self.formulas:
            entry = formula.kernel_entry(len(rows))
            if entry is None:
                self.table = None
                break
            self.table.append(entry[0])
            rows += entry[1]
        self.text = torch.stack(rows).float().contiguous().to(self.device) if self.table else None
        self._use_cpu_kernel = self.table is not None and self.device.type == "cpu"
        self._use_cuda_kernel = self.table is not None and kernels.cuda_kernels_run_on(self.device)

    @property
    def num_tasks(self) -> int:
        return len(self.criteria)

    @property
    def embed_dim(self) -> int | None:
        return None if self.text is None else self.text.shape[1]

    def __call__(self, embeddings: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Raw image embeddings (N, D) of any float dtype -> rewards (N, K) float32."""
        expected = self.embed_dim
        if embeddings.ndim != 2 or (expected is not None and embeddings.shape[1] != expected):
            raise ValueError(f"embeddings must be (N, {expected or 'D'}), got {tuple(embeddings.shape)}")
        if embeddings.device != self.device:
            embeddings = embeddings.to(self.device)
        if embeddings.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            embeddings = embeddings.float()
        if embeddings.stride(1) != 1:
            embeddings = embeddings.contiguous()
        n, d = embeddings.shape
        out = torch.empty((n, self.num_tasks), dtype=torch.float32, device=self.device) if out is None else out
        if n == 0:
            return out
        if not (self._use_cpu_kernel or self._use_cuda_kernel):
            out.copy_(self.reference(embeddings))
            return out
        assert self.text is not None and self.table is not None
        args = (embeddings.data_ptr(), kernels.kernel_dtype(embeddings.dtype), n, d, embeddings.stride(0))
        if self._use_cpu_kernel:
            kernels.reward_cpu(*args, self.text.data_ptr(), self.text.shape[0], self.table, out.data_ptr())
        else:
            self._reward_cuda(args, out)
        return out

    def _reward_cuda(self, args: tuple[int, kernels.DType, int, int, int], out: torch.Tensor) -> None:
        """One kernel launch per MAX_CUDA_REWARD_TASKS criteria (the criterion table rides in the launch parameters)."""
        assert self.text is not None and self.table is not None
        stream = torch.cuda.current_stream(self.device).cuda_stream
        limit = kernels.MAX_CUDA_REWARD_TASKS
        for first in range(0, self.num_tasks, limit):
            criteria = self.table[first : first + limit]
            part = (
                out
                if len(criteria) == self.num_tasks
                else torch.empty((out.shape[0], len(criteria)), dtype=torch.float32, device=self.device)
            )
            kernels.reward_cuda(
                *args, self.text.data_ptr(), self.text.shape[0], criteria, part.data_ptr(), self.device.index, stream
            )
            if part is not out:
                out[:, first : first + len(criteria)] = part

    def reference(self, embeddings: torch.Tensor) -> torch.Tensor:
        """The same rewards from the formulas in plain torch: the reference of the kernels, and the
        path where no kernel runs."""
        x = normalize(embeddings)
        return torch.stack([formula.reward(x) for formula in self.formulas], dim=1)
