"""Packed reward model with FlashMask: ``python examples/rm/train.py [--config examples/rm/config.yaml]``.

Triples are laid out ``prompt + chosen + rejected`` (each response ends with EOS) and packed by
:func:`paddle_flashmask.mask_builders.pack_preference`; a linear head on the Llama backbone scores
each answer at its last token. Because the mask hides the chosen answer from the rejected one, a
single forward gives both scores exactly as two separate forwards would. Loss: the Bradley-Terry
``-log sigmoid(r_chosen - r_rejected)``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.common import recipe  # noqa: E402
from examples.dpo.train import encode  # noqa: E402  (same triple tokenization)

STAGE = "rm"


def build_data(cfg: dict, tok) -> dict:
    from paddle_flashmask.mask_builders import pack_preference
    convention = cfg.get("mask_convention", "default")
    if convention == "paddleformers":
        raise ValueError("mask_convention: expected 'default' or 'paddlenlp' (prompt + chosen + rejected "
                         "layout), found 'paddleformers'")
    triples = encode(recipe.load_jsonl(cfg["train_dataset_path"], cfg.get("max_examples")), tok)
    lens = [(len(t["prompt"]), len(t["chosen"]), len(t["rejected"])) for t in triples]
    pack = pack_preference(lens, int(cfg["max_seq_len"]), greedy=bool(cfg.get("greedy_zero_padding", True)),
                           convention=convention)
    b, s = pack.position_ids.shape
    input_ids = np.full((b, s), tok.pad_token_id, np.int64)
    for n, (row, start, _) in enumerate(pack.prompt_spans):
        if row >= 0:
            ids = triples[n]["prompt"] + triples[n]["chosen"] + triples[n]["rejected"]
            input_ids[row, start:start + len(ids)] = ids
    return {"pack": pack, "lens": lens, "input_ids": input_ids, "position_ids": pack.position_ids,
            "attn_mask_startend_row_indices": pack.mask.startend_row_indices}


def batches(data: dict, rows_per_batch: int, steps: int) -> list[dict]:
    pack = data["pack"]
    s = data["input_ids"].shape[1]
    real = pack.example_ids >= 0
    out = []
    for sel in recipe.row_batches(len(data["input_ids"]), rows_per_batch, steps):
        where = {int(r): k for k, r in enumerate(sel)}
        members = [n for n in range(len(data["lens"])) if int(pack.chosen_spans[n, 0]) in where]
        # flat positions of the last token of each answer: [N, 2] (chosen, rejected)
        last = np.array([[where[int(sp[n, 0])] * s + int(sp[n, 2]) - 1 for sp in (pack.chosen_spans, pack.rejected_spans)]
                         for n in members], np.int64)
        batch = {k: data[k][sel] for k in ("input_ids", "position_ids", "attn_mask_startend_row_indices")}
        batch.update(score_positions=last, real_tokens=int(real[sel].sum()))
        out.append(recipe.to_tensors(batch))
    return out


class RewardModel:
    """PaddleFormers Llama backbone + a scalar head (the LM head is unused)."""

    def __init__(self, lm) -> None:
        import paddle
        self.lm = lm
        self.head = paddle.nn.Linear(lm.config.hidden_size, 1)

    def parameters(self):
        return list(self.lm.model.parameters()) + list(self.head.parameters())

    def scores(self, batch: dict):
        out = self.lm.model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                            attn_mask_startend_row_indices=batch["attn_mask_startend_row_indices"])
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        flat = hidden.reshape([-1, hidden.shape[-1]]).astype("float32")
        picked = flat.gather(batch["score_positions"].reshape([-1]))
        return self.head(picked.astype(self.head.weight.dtype)).astype("float32").reshape([-1, 2])


def rm_loss(model: RewardModel, batch: dict):
    import paddle.nn.functional as F
    r = model.scores(batch)
    return -F.log_sigmoid(r[:, 0] - r[:, 1]).mean(), (r[:, 0] > r[:, 1]).astype("float32").mean()


def main(argv=None) -> dict:
    cfg = recipe.parse_args(Path(__file__).with_name("config.yaml"), argv)
    out_dir = recipe.ROOT / cfg.get("output_dir", f"out/{STAGE}")
    device, dtype = recipe.setup_runtime(cfg)
    recipe.log(STAGE, f"config {cfg['_config_path']}: flash_mask={cfg.get('flash_mask')}, device={device}, dtype={dtype}")
    tok = recipe.build_tokenizer(cfg)
    data = build_data(cfg, tok)
    pack = data["pack"]
    recipe.log(STAGE, f"data: {len(data['lens'])} triples packed with pack_preference(convention="
                      f"{cfg.get('mask_convention', 'default')!r}) into {len(pack.rows)} rows x {cfg['max_seq_len']}")
    recipe.report_mask(STAGE, pack.mask, [data["lens"][n] for n in pack.rows[0]], out_dir,
                       "(prompt, chosen, rejected) triples")
    model = RewardModel(recipe.build_model(cfg, tok, dtype))
    recipe.log(STAGE, f"reward model: backbone of {recipe.describe_model(model.lm)} + linear score head")
    train_batches = batches(data, int(cfg.get("per_device_train_batch_size", 2)), int(cfg.get("max_steps", 10)))
    if cfg.get("verify_against_eager") and cfg.get("flash_mask", True):
        recipe.check_against_eager(STAGE, model.lm, train_batches[0], lambda b: model.scores(b).sum(), "summed scores")
    accs = []

    def step_loss(b):
        loss, acc = rm_loss(model, b)
        accs.append(float(acc))
        return loss

    summary = recipe.train(STAGE, cfg, model.parameters(), train_batches, step_loss, lambda b: int(b["real_tokens"]))
    recipe.log(STAGE, f"pairwise accuracy: first step {accs[0]:.2f}, last step {accs[-1]:.2f}")
    summary.update(stage=STAGE, config=cfg["_config_path"], flash_mask=bool(cfg.get("flash_mask", True)),
                   accuracy_last=accs[-1], mask_png=str(out_dir / "mask_row0.png"))
    recipe.log(STAGE, f"summary: {recipe.write_summary(out_dir, summary)}")
    return summary


if __name__ == "__main__":
    main()
