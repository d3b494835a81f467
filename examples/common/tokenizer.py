"""A trivial bundled tokenizer (no downloads): UTF-8 bytes plus a few special tokens.

ids: 0 <pad>, 1 <bos>, 2 <eos>, 3 <|user|>, 4 <|assistant|>, 5..260 the bytes 0..255.
Chat layout of one example: ``<bos> <|user|> prompt <|assistant|>`` | ``response <eos>``.
"""
from __future__ import annotations

PAD, BOS, EOS, USER, ASSISTANT = 0, 1, 2, 3, 4
BYTE_OFFSET = 5
VOCAB_SIZE = BYTE_OFFSET + 256


class ByteTokenizer:
    """Byte-level tokenizer with the interface the recipes use (also met by a wrapped HF/PaddleFormers one)."""

    vocab_size = VOCAB_SIZE
    pad_token_id = PAD
    bos_token_id = BOS
    eos_token_id = EOS

    def encode(self, text: str) -> list[int]:
        return [b + BYTE_OFFSET for b in text.encode("utf-8")]

    def decode(self, ids) -> str:
        return bytes(int(i) - BYTE_OFFSET for i in ids if int(i) >= BYTE_OFFSET).decode("utf-8", "replace")

    def prompt_ids(self, prompt: str) -> list[int]:
        return [BOS, USER] + self.encode(prompt) + [ASSISTANT]

    def response_ids(self, response: str) -> list[int]:
        return self.encode(response) + [EOS]


class PretrainedTokenizer:
    """Adapter around a real tokenizer (``AutoTokenizer.from_pretrained(path)``) with the same interface."""

    def __init__(self, tok) -> None:
        self.tok = tok
        self.vocab_size = len(tok)
        self.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        self.bos_token_id = tok.bos_token_id
        self.eos_token_id = tok.eos_token_id

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids))

    def prompt_ids(self, prompt: str) -> list[int]:
        bos = [self.bos_token_id] if self.bos_token_id is not None else []
        return bos + self.encode(f"User: {prompt}\nAssistant: ")

    def response_ids(self, response: str) -> list[int]:
        return self.encode(response) + ([self.eos_token_id] if self.eos_token_id is not None else [])
