"""The tiny offline model: a byte-level BPE tokenizer with a ChatML tool-calling template, and a
small random Qwen2 causal LM, built locally because no model hub is reachable.

Contracts that the rest of arl relies on:
- Any text encodes (byte-level BPE over all 256 bytes) and `decode(encode(x)) == x` for NFC
  text (all ASCII is NFC); other text comes back NFC-composed, as with Qwen2's own tokenizer.
- `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos = end of turn) are special tokens;
  `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>` are single added tokens that
  are NOT special, so decoding with `skip_special_tokens=True` (vLLM's default) keeps the call tags.
- Token-exact turns: every boundary between turns in the template falls on a special token, so
  ids(full conversation) == ids(prompt + generation prompt) + ids(assistant text + <|im_end|>)
  + ids(template delta for the next messages + generation prompt) + ...; the RL loop appends
  those pieces without ever re-tokenizing a whole conversation. (The one non-special seam is
  `<|im_start|>assistant\\n` + the sampled text, and the engine samples those ids itself.)
- The normalizer (NFC), pre-tokenizer and decoder are exactly Qwen2's, because transformers 5
  rebuilds them as Qwen2's for any folder whose config says `qwen2`; so a saved folder reloads
  unchanged.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence

import torch
import transformers
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.utils.chat_template_utils import render_jinja_template

from arl.files import mark, require_ours
from arl.schema import ARCHITECTURES
from arl.types import Message, ToolSchema

PAD_TOKEN = "<|endoftext|>"  # noqa: S105 (a token, not a password)
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # eos: ends every turn
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
TOOL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
MAX_POSITIONS = 1024

# Qwen2's pre-tokenizer regex, copied verbatim from transformers' tokenization_qwen2.py: digits
# split one by one, newlines form their own pieces.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# ChatML with Hermes-style tool calls. Each tool is shown as one signature line,
# `name(arg: type lo-hi, ...): description`, instead of its JSON schema: on the tictactoe_move
# prompt that is 181 -> 98 tokens, and every prompt token is paid for at every rollout
# and every learner step. One tool message = one user turn, so a rendered prefix never changes
# when messages are appended.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}"
    "{%- endif %}"
    "{{- '# Tools' }}"
    "{%- for tool in tools %}{%- set f = tool.function if tool.function is defined else tool %}"
    "{{- '\\n' + f.name + '(' }}"
    "{%- for name, p in (f.parameters.properties | default({})).items() %}"
    "{{- (', ' if not loop.first else '') + name + ': ' + (p.type | default('any')) }}"
    "{%- if p.minimum is defined and p.maximum is defined %}"
    "{{- ' ' + (p.minimum | string) + '-' + (p.maximum | string) }}{%- endif %}"
    "{%- endfor %}"
    "{{- ')' + (': ' + f.description if f.description else '') }}"
    "{%- endfor %}"
    "{{- '\\nTo call a tool, reply <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>"
    "<|im_end|>\\n' }}"
    "{%- elif messages and messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content"
    " + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def render_chat(
    messages: Sequence[Message],
    tools: Sequence[ToolSchema] = (),
    add_generation_prompt: bool = False,
) -> str:
    """The text `CHAT_TEMPLATE` renders, without needing a tokenizer (to build a corpus for
    `build_tokenizer`). Equal to `tokenizer.apply_chat_template(..., tokenize=False)`."""
    rendered, _ = render_jinja_template(
        conversations=[[m.as_dict() for m in messages]],
        tools=[t.as_dict() for t in tools] or None,
        chat_template=CHAT_TEMPLATE,
        add_generation_prompt=add_generation_prompt,
    )
    return rendered[0]


def build_tokenizer(corpus: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `corpus` with at most `vocab_size` ids in all: 7 special/added
    tokens, 256 byte tokens, then merges (fewer if the corpus runs out of pairs; the model is
    sized by len(tokenizer)). Special and tool tokens in the corpus are split out, never learnt.
    Deterministic for a given corpus. The chat template is `tokenizer.chat_template`.

    Put whole rendered conversations (`render_chat`) in the corpus, not only message texts, so
    the template's own text earns merges: on the tictactoe_move prompt at vocab 512 that took
    the prompt from 222 to 183 tokens."""
    reserved = len(SPECIAL_TOKENS) + len(TOOL_TOKENS) + 256
    if vocab_size < reserved:
        raise ValueError(
            f"vocab_size must be >= {reserved} (7 added tokens + 256 bytes), got {vocab_size}"
        )
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *TOOL_TOKENS],  # ids 0..6, excluded from merges
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all bytes: any text encodes
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    # The trainer marks all 7 as special; the tool tags must survive skip_special_tokens.
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,  # else decode(encode(x)) != x around punctuation
    )




def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    seed: int = 0,
    architecture: str = "qwen2",
) -> PreTrainedModel:
    """A randomly initialised fp32 causal LM sized for `tokenizer` (vocab = len(tokenizer)),
    tied embeddings. Same seed, same weights; the global RNG is untouched. Head size
    hidden/heads must be >= 32 (vLLM's minimum).

    - `qwen2`: MLP width 4 * hidden, RoPE base 10000 (what older transformers assume when they
      cannot read `rope_parameters`).
    - `bailing_hybrid` (Ling-3.0's family, transformers >= 5.2x): layers alternate linear
      (KDA) and full (MLA) attention; the first MLP is dense, the others are mixtures of 8
      experts with top-2 routing plus a shared expert. Raises ImportError naming the version
      where the installed transformers lacks it."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {architecture!r}")
    if hidden_size % num_heads or hidden_size // num_heads < 32:
        raise ValueError(f"head size {hidden_size}/{num_heads} must be an integer >= 32")
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if architecture == "bailing_hybrid":
            model = AutoModelForCausalLM.from_config(_bailing_hybrid_config(
                len(tokenizer), hidden_size, num_layers, num_heads, pad_id, eos_id))
        else:
            model = Qwen2ForCausalLM(_qwen2_config(
                len(tokenizer), hidden_size, num_layers, num_heads, pad_id, eos_id))
    model.generation_config = GenerationConfig(
        bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id
    )
    return model.eval()


def _qwen2_config(vocab: int, hidden: int, layers: int, heads: int, pad_id: int,
                  eos_id: int) -> Qwen2Config:
    return Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        bos_token_id=pad_id,  # as Qwen2.5; chat prompts carry no BOS
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )


def _bailing_hybrid_config(vocab: int, hidden: int, layers: int, heads: int, pad_id: int,
                           eos_id: int) -> PretrainedConfig:
    try:
        from transformers import BailingHybridConfig
    except ImportError as e:
        raise ImportError(
            "architecture bailing_hybrid needs transformers >= 5.24 (it is absent from 5.19); "
            f"installed: {transformers.__version__}") from e
    head = hidden // heads
    return BailingHybridConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,  # the dense first layer
        moe_intermediate_size=hidden // 2,  # each expert; 8 of them, 2 routed + 1 shared
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=head,  # KDA (linear attention) head size
        layer_group_size=2,  # KDA, MLA, KDA, MLA, ...: both kinds in any model of >= 2 layers
        first_k_dense_replace=1,
        num_local_experts=8,
        num_experts_per_tok=2,
        n_group=2,
        topk_group=1,
        n_shared_experts=1,
        kv_lora_rank=2 * head,  # MLA's compressed KV width
        qk_rope_head_dim=head // 2,
        qk_nope_head_dim=head,
        v_head_dim=head,
        num_mtp_layers=0,  # multi-token prediction heads are a pretraining aid; RL needs none
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )


def save_model_dir(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, path: str | os.PathLike
) -> None:
    """Write a normal HF folder (config.json, generation_config.json, model.safetensors,
    tokenizer.json, tokenizer_config.json, chat_template.jinja) at `path`, with arl's marker
    of a warm-start folder, replacing a folder there only if arl made it (NotOurs, one line,
    for any other: arl/files.py). Atomic: the folder is written next to `path` and renamed
    into place, so a crash leaves the old folder or the new one (or, between the two renames,
    none: the old one then waits in a hidden `.NAME.old-*` sibling), never half of one."""
    path = os.path.abspath(os.fspath(path))
    require_ours(path, "warmstart", "warmstart.output")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.tmp-")
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        mark(tmp, "warmstart")
        # mkdtemp makes the folder private (0700); others (containers, workers) read models
        os.chmod(tmp, 0o755)  # noqa: S103
        old = None
        if os.path.exists(path):
            old = tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(path)}.old-")
            os.rename(path, os.path.join(old, "dir"))  # a rename cannot replace a full folder
        os.rename(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
