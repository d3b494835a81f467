"""Packed SFT with FlashMask: ``python examples/sft/train.py [--config examples/sft/config.yaml]``.

Examples are tokenized, packed into rows of ``max_seq_len`` with
:func:`paddle_flashmask.mask_builders.pack_sft` (one causal document per example, the framework's
padding convention), and a PaddleFormers Llama trains on them with ``flash_mask: true`` — its
attention runs :func:`paddle_flashmask.flashmask_attention`. Loss = mean next-token cross entropy
over response tokens.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.common import recipe  # noqa: E402

STAGE = "sft"


def encode(rows: list[dict], tok, max_len: int) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) per example, shifted inside the example; prompt labels are -100."""
    out = []
    for ex in rows:
        prompt, response = tok.prompt_ids(ex["src"]), tok.response_ids(ex["tgt"])
        full = (prompt + response)[: max_len + 1]
        labels = ([-100] * (len(prompt) - 1) + response)[: len(full) - 1]
        out.append((full[:-1], labels))
    return out


def build_data(cfg: dict, tok) -> dict:
    """Pack the dataset: numpy ``input_ids``/``labels``/``position_ids``/indices for every row."""
    from paddle_flashmask.mask_builders import pack_sft
    examples = encode(recipe.load_jsonl(cfg["train_dataset_path"], cfg.get("max_examples")), tok,
                      int(cfg["max_seq_len"]))
    lengths = [len(x) for x, _ in examples]
    pack = pack_sft(lengths, int(cfg["max_seq_len"]), greedy=bool(cfg.get("greedy_zero_padding", True)),
                    convention=cfg.get("mask_convention", "default"))
    b, s = pack.position_ids.shape
    input_ids = np.full((b, s), tok.pad_token_id, np.int64)
    labels = np.full((b, s), -100, np.int64)
    for n, (row, start, end) in enumerate(pack.spans):
        if row >= 0:
            input_ids[row, start:end] = examples[n][0]
            labels[row, start:end] = examples[n][1]
    return {"pack": pack, "lengths": lengths, "input_ids": input_ids, "labels": labels,
            "position_ids": pack.position_ids,
            "attn_mask_startend_row_indices": pack.mask.startend_row_indices}


def batches(data: dict, rows_per_batch: int, steps: int) -> list[dict]:
    keys = ("input_ids", "labels", "position_ids", "attn_mask_startend_row_indices")
    real = data["pack"].example_ids >= 0
    return [recipe.to_tensors({**{k: data[k][sel] for k in keys}, "real_tokens": int(real[sel].sum())})
            for sel in recipe.row_batches(len(data["input_ids"]), rows_per_batch, steps)]


def loss(model, batch: dict):
    """Mean next-token cross entropy over the response tokens of the batch."""
    logp, mask = recipe.token_logps(recipe.model_logits(model, batch), batch["labels"])
    return -logp.sum() / mask.sum()


def tokens_of(batch: dict) -> int:
    """Real (non-padding) tokens in the batch: what tokens/s counts."""
    return int(batch["real_tokens"])


def main(argv=None) -> dict:
    cfg = recipe.parse_args(Path(__file__).with_name("config.yaml"), argv)
    out_dir = recipe.ROOT / cfg.get("output_dir", f"out/{STAGE}")
    device, dtype = recipe.setup_runtime(cfg)
    recipe.log(STAGE, f"config {cfg['_config_path']}: flash_mask={cfg.get('flash_mask')}, device={device}, dtype={dtype}")
    tok = recipe.build_tokenizer(cfg)
    data = build_data(cfg, tok)
    pack, lengths = data["pack"], data["lengths"]
    used = int((pack.example_ids >= 0).sum())
    recipe.log(STAGE, f"data: {len(lengths)} examples from {cfg['train_dataset_path']}, token lengths "
                      f"{min(lengths)}..{max(lengths)} (mean {np.mean(lengths):.0f}), {type(tok).__name__}")
    recipe.log(STAGE, f"packed with pack_sft(convention={cfg.get('mask_convention')!r}) into {len(pack.rows)} rows "
                      f"x {cfg['max_seq_len']} tokens ({used / pack.position_ids.size:.0%} real tokens); "
                      f"mask {pack.mask.startend_row_indices.dtype}{list(pack.mask.startend_row_indices.shape)} "
                      f"causal={pack.mask.causal}")
    recipe.report_mask(STAGE, pack.mask, [lengths[n] for n in pack.rows[0]], out_dir, "documents")
    model = recipe.build_model(cfg, tok, dtype)
    recipe.log(STAGE, f"model: {recipe.describe_model(model)}")
    steps = int(cfg.get("max_steps", 10))
    train_batches = batches(data, int(cfg.get("per_device_train_batch_size", 2)), steps)
    if cfg.get("verify_against_eager") and cfg.get("flash_mask", True):
        recipe.check_against_eager(STAGE, model, train_batches[0], lambda b: loss(model, b))
    summary = recipe.train(STAGE, cfg, model.parameters(), train_batches, lambda b: loss(model, b), tokens_of)
    summary.update(stage=STAGE, config=cfg["_config_path"], flash_mask=bool(cfg.get("flash_mask", True)),
                   attention_backend=recipe.attention_backend_used() if cfg.get("flash_mask", True) else "eager",
                   mask_png=str(out_dir / "mask_row0.png"))
    recipe.log(STAGE, f"summary: {recipe.write_summary(out_dir, summary)}")
    return summary


if __name__ == "__main__":
    main()
