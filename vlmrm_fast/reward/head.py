"""K reward tasks scored from one batch of image embeddings by the fused kernel.

The text side is computed once: for a goal-baseline task the rows ``g`` and
``u`` plus the constants ``|g|^2`` and ``g.u``; for a binary task the goal and
negative prompt embeddings. The kernel (C++ twin on the CPU, CUDA on the GPU)
normalizes each image embedding and evaluates every task in O(D).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from vlmrm_fast import kernels
from vlmrm_fast.device import native_cuda_usable, resolve_device
from vlmrm_fast.reward import math as rmath
from vlmrm_fast.reward.tasks import BinaryTask, GoalBaselineTask, Task


class RewardHead:
    """Text-side tables for ``tasks`` and the kernel that applies them."""

    def __init__(
        self,
        tasks: Sequence[Task],
        text_embedding: Callable[[str], torch.Tensor],
        logit_scale: float,
        device: torch.device,
    ):
        """``text_embedding(prompt)`` returns the normalized (D,) float32 embedding."""
        self.tasks = tuple(tasks)
        self.device = resolve_device(device)  # "cuda" -> "cuda:N": the kernel needs the index
        rows: list[torch.Tensor] = []
        table: list = []
        self._reference: list[tuple] = []  # per task, torch inputs of the fallback
        for task in self.tasks:
            entry = kernels.RewardTask()
            entry.first_row = len(rows)
            if isinstance(task, GoalBaselineTask):
                target = torch.stack([text_embedding(p) for p in task.target_prompts])
                baseline = (
                    torch.stack([text_embedding(p) for p in task.baseline_prompts]) if task.baseline_prompts else None
                )
                g, u = rmath.goal_and_direction(target, baseline)
                rows += [g, u]
                entry.kind = kernels.RewardKind.goal_baseline
                entry.num_rows = 2
                entry.alpha = task.alpha
                entry.g_norm2 = float(g @ g)
                entry.g_dot_u = float(g @ u)
                self._reference.append(("goal_baseline", g, u, task.alpha))
            elif isinstance(task, BinaryTask):
                embs = [text_embedding(p) for p in task.prompts]
                rows += embs
                scale = logit_scale if task.temperature is None else 1.0 / task.temperature
                entry.kind = kernels.RewardKind.binary
                entry.num_rows = len(embs)
                entry.scale = scale
                entry.threshold = task.threshold
                entry.probability = task.probability
                self._reference.append(
                    ("binary", embs[0], torch.stack(embs[1:]), scale, task.threshold, task.probability)
                )
            else:  # pragma: no cover - as_reward_task guards this
                raise TypeError(f"unknown task type {type(task).__name__}")
            table.append(entry)
        self.text = torch.stack(rows).float().contiguous().to(self.device)
        self.table = table
        self._use_cuda_kernel = self.device.type == "cuda" and native_cuda_usable()

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def __call__(self, embeddings: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Raw image embeddings (N, D) of any float dtype -> rewards (N, K) float32."""
        if embeddings.ndim != 2 or embeddings.shape[1] != self.text.shape[1]:
            raise ValueError(f"embeddings must be (N, {self.text.shape[1]}), got {tuple(embeddings.shape)}")
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
        args = (embeddings.data_ptr(), kernels.kernel_dtype(embeddings.dtype), n, d, embeddings.stride(0))
        if self.device.type == "cpu":
            kernels.reward_cpu(*args, self.text.data_ptr(), self.text.shape[0], self.table, out.data_ptr())
        elif self._use_cuda_kernel:
            self._reward_cuda(args, out)
        else:
            out.copy_(self.reference(embeddings))
        return out

    def _reward_cuda(self, args: tuple, out: torch.Tensor) -> None:
        """One kernel launch per MAX_CUDA_REWARD_TASKS tasks (the task table rides in the launch parameters)."""
        stream = torch.cuda.current_stream(self.device).cuda_stream
        limit = kernels.MAX_CUDA_REWARD_TASKS
        for first in range(0, self.num_tasks, limit):
            tasks = self.table[first : first + limit]
            part = (
                out
                if len(tasks) == self.num_tasks
                else torch.empty((out.shape[0], len(tasks)), dtype=torch.float32, device=self.device)
            )
            kernels.reward_cuda(
                *args, self.text.data_ptr(), self.text.shape[0], tasks, part.data_ptr(), self.device.index, stream
            )
            if part is not out:
                out[:, first : first + len(tasks)] = part

    def reference(self, embeddings: torch.Tensor) -> torch.Tensor:
        """The same rewards through plain torch (fallback and cross-check)."""
        x = rmath.normalize(embeddings)
        cols = []
        for ref in self._reference:
            if ref[0] == "goal_baseline":
                _, g, u, alpha = ref
                cols.append(rmath.goal_baseline_reward(x, g.to(x.device), u.to(x.device), alpha))
            else:
                _, goal, negatives, scale, threshold, probability = ref
                p = rmath.binary_probability(x, goal.to(x.device), negatives.to(x.device), scale)
                cols.append(p if probability else (p > threshold).float())
        return torch.stack(cols, dim=1)
