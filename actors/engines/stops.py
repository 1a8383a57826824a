"""Where a sampled turn ends: the stop ids every engine uses by default."""

from __future__ import annotations

from typing import Any

END_OF_TURN = "<|im_end|>"


def default_stop_ids(tokenizer: Any) -> list[int]:
    """The tokenizer's eos id and the chat end-of-turn token, where they exist."""
    ids = [tokenizer.eos_token_id]
    if END_OF_TURN in tokenizer.get_vocab():
        ids.append(tokenizer.convert_tokens_to_ids(END_OF_TURN))
    return [i for i in ids if i is not None]
