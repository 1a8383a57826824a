"""The reference policy of the KL penalty (`learner.loss.kl_coef`): the model the run starts
from, whose log-probs on a step's sampled tokens anchor `gspo.kl_penalty`.

With LoRA the reference is the trained model itself with its adapters switched off: the base
weights never change, so no second copy is needed. Without LoRA it is a frozen fp32 copy of
`model.path` on the learner's device (one more model's weights in memory, no gradients, no
optimizer state). Either way its log-probs are computed like the policy's (same micro-batches,
same compute dtype, same shared-prefix passes), so at step 0 they equal the policy's bit for
bit and the penalty starts at exactly 0.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch

from arl.learner.collate import Batch
from arl.learner.mini_batch import Forward
from arl.model.causal_lm import load_model
from arl.model.lora import is_lora


class Reference:
    """Log-probs of the reference policy, micro-batch by micro-batch, without gradients."""

    def __init__(self, model: torch.nn.Module, model_path: str, forward: Forward):
        """`model`: the trained model (a peft model with LoRA); `model_path`: where it was
        loaded from; `forward`: the learner's passes, whose settings the reference shares."""
        self.lora = is_lora(model)
        self.model = model
        if self.lora:  # the trained module with its adapters off
            self.forward = forward
        else:
            frozen, _ = load_model(model_path, "float32")
            frozen.to(forward.device).requires_grad_(False)
            if forward.device.type == "cpu":
                frozen.set_attn_implementation("eager")  # as the trained copy (gspo_learner)
            holder = SimpleNamespace(module=frozen)  # what Forward reads of a backend
            self.forward = Forward(holder, forward.device, forward.micro_batch_size,
                                   forward.compute_dtype, forward.share_prefix)

    def _adapters_off(self) -> contextlib.AbstractContextManager:
        return self.model.disable_adapter() if self.lora else contextlib.nullcontext()

    @torch.no_grad()
    def logprobs(self, mini: Batch | None, temperature: float, passes: int
                 ) -> torch.Tensor | None:
        """[b, t] float32 reference log-probs of a mini-batch's ids (None for a rank without
        rows, which only makes its `passes`, as `Forward.old_logprobs` does)."""
        micros = mini.split(self.forward.micro_batch_size) if mini is not None else []
        out = torch.zeros(mini.input_ids.shape, dtype=torch.float32) if micros else None
        start = 0
        with self._adapters_off():
            for micro in micros:
                logprobs, _ = self.forward.logprobs(micro, temperature)
                out[start : start + micro.size, : logprobs.shape[1]] = logprobs.cpu()
                start += micro.size
            if self.lora:  # the trained module's passes: keep ranks in step (uniform_passes)
                self.forward.fill(max(0, passes - len(micros)), temperature, backward=False)
        return out

    def attach(self, mini: Batch | None, temperature: float, passes: int) -> Batch | None:
        """`mini` carrying its reference log-probs (`logprobs`); None stays None."""
        ref = self.logprobs(mini, temperature, passes)
        return mini.with_ref_logprobs(ref) if mini is not None else None
