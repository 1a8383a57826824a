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


def end_of_turn_id(tokenizer: Any) -> int:
    """The id that ends an assistant turn: <|im_end|> for ChatML tokenizers, else eos."""
    token_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
        return token_id
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has neither <|im_end|> nor an eos token to end a turn")
    return tokenizer.eos_token_id
