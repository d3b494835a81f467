"""Packed DPO with FlashMask: ``python examples/dpo/train.py [--config examples/dpo/config.yaml]``.

Each preference triple becomes one sequence in PaddleFormers' DPO layout
``prompt + chosen[:-1] + prompt[-1] + rejected[:-1]`` (the rejected answer restarts from a copy
of the last prompt token, so both answers are scored as continuations of the same prompt) and
triples are packed several per row by :func:`paddle_flashmask.mask_builders.pack_preference`: the
mask lets both answers see their prompt and hides the chosen answer from the rejected one. One
forward of the policy scores both answers; the reference model is the initial policy (frozen).
Loss: ``-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r)))``, averaged over triples.
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.common import recipe  # noqa: E402

STAGE = "dpo"


def encode(rows: list[dict], tok) -> list[dict]:
    """Token lists per triple: prompt, chosen and rejected (the responses end with EOS)."""
    return [{"prompt": tok.prompt_ids(ex["prompt"]), "chosen": tok.response_ids(ex["chosen"]),
             "rejected": tok.response_ids(ex["rejected"])} for ex in rows]


def triple_tokens(t: dict) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one triple in the PaddleFormers layout (labels -100 on the prompt)."""
    p, c, r = t["prompt"], t["chosen"], t["rejected"]
    ids = p + c[:-1] + [p[-1]] + r[:-1]
    labels = [-100] * (len(p) - 1) + c + r
    assert len(ids) == len(labels) == len(p) + len(c) + len(r) - 1
    return ids, labels


def build_data(cfg: dict, tok) -> dict:
    from paddle_flashmask.mask_builders import pack_preference
    if cfg.get("mask_convention", "paddleformers") != "paddleformers":
        raise ValueError("mask_convention: expected 'paddleformers' for this DPO recipe (its token layout), "
                         f"found {cfg.get('mask_convention')!r}")
    triples = encode(recipe.load_jsonl(cfg["train_dataset_path"], cfg.get("max_examples")), tok)
    lens = [(len(t["prompt"]), len(t["chosen"]), len(t["rejected"])) for t in triples]
    pack = pack_preference(lens, int(cfg["max_seq_len"]), greedy=bool(cfg.get("greedy_zero_padding", True)),
                           convention="paddleformers")
    b, s = pack.position_ids.shape
    input_ids = np.full((b, s), tok.pad_token_id, np.int64)
    labels = np.full((b, s), -100, np.int64)
    for n, (row, start, _) in enumerate(pack.prompt_spans):
        if row < 0:
            continue
        ids, lab = triple_tokens(triples[n])
        input_ids[row, start:start + len(ids)] = ids
        labels[row, start:start + len(ids)] = lab
    # label positions scoring each answer: chosen = [prompt_end - 1, chosen_end), rejected = its span
    chosen_pos = np.stack([pack.prompt_spans[:, 0], pack.prompt_spans[:, 2] - 1, pack.chosen_spans[:, 2]], 1)
    return {"pack": pack, "lens": lens, "input_ids": input_ids, "labels": labels,
            "position_ids": pack.position_ids,
            "attn_mask_startend_row_indices": pack.mask.startend_row_indices,
            "chosen_pos": chosen_pos, "rejected_pos": pack.rejected_spans}


def selection_matrix(rows: np.ndarray, data: dict) -> np.ndarray:
    """float32 [2N, B*S]: row 2n sums the chosen label log-probs of the n-th triple in ``rows``, 2n+1 the rejected."""
    s = data["input_ids"].shape[1]
    where = {int(r): k for k, r in enumerate(rows)}
    members = [n for n in range(len(data["lens"])) if int(data["chosen_pos"][n, 0]) in where]
    sel = np.zeros((2 * len(members), len(rows) * s), np.float32)
    for k, n in enumerate(members):
        for j, spans in enumerate((data["chosen_pos"], data["rejected_pos"])):
            row, a, b = (int(v) for v in spans[n])
            base = where[row] * s
            sel[2 * k + j, base + a:base + b] = 1.0
    return sel


def batches(data: dict, rows_per_batch: int, steps: int) -> list[dict]:
    keys = ("input_ids", "labels", "position_ids", "attn_mask_startend_row_indices")
    real = data["pack"].example_ids >= 0
    out = []
    for sel in recipe.row_batches(len(data["input_ids"]), rows_per_batch, steps):
        batch = {k: data[k][sel] for k in keys}
        batch["response_sum"] = selection_matrix(sel, data)
        batch["real_tokens"] = int(real[sel].sum())
        out.append(recipe.to_tensors(batch))
    return out


def response_logps(model, batch: dict):
    """Summed label log-probs per answer: ``[N, 2]`` (chosen, rejected)."""
    logp, _ = recipe.token_logps(recipe.model_logits(model, batch), batch["labels"])
    return (batch["response_sum"] @ logp.reshape([-1, 1])).reshape([-1, 2])


def dpo_loss(policy, batch: dict, ref_logps, beta: float):
    """Sigmoid DPO loss of the batch given the reference log-probs ``[N, 2]``; also returns accuracy."""
    import paddle.nn.functional as F
    pi = response_logps(policy, batch)
    margin = (pi[:, 0] - ref_logps[:, 0]) - (pi[:, 1] - ref_logps[:, 1])
    return -F.log_sigmoid(beta * margin).mean(), (margin > 0).astype("float32").mean()


def reference_logps(reference, batch: dict):
    import paddle
    with paddle.no_grad():
        return response_logps(reference, batch).detach()


def main(argv=None) -> dict:
    cfg = recipe.parse_args(Path(__file__).with_name("config.yaml"), argv)
    out_dir = recipe.ROOT / cfg.get("output_dir", f"out/{STAGE}")
    device, dtype = recipe.setup_runtime(cfg)
    recipe.log(STAGE, f"config {cfg['_config_path']}: flash_mask={cfg.get('flash_mask')}, device={device}, dtype={dtype}")
    tok = recipe.build_tokenizer(cfg)
    data = build_data(cfg, tok)
    pack = data["pack"]
    recipe.log(STAGE, f"data: {len(data['lens'])} (prompt, chosen, rejected) triples from {cfg['train_dataset_path']}; "
                      f"packed with pack_preference(convention='paddleformers') into {len(pack.rows)} rows x "
                      f"{cfg['max_seq_len']} tokens, {len(pack.dropped)} dropped")
    recipe.report_mask(STAGE, pack.mask, [data["lens"][n] for n in pack.rows[0]], out_dir,
                       "(prompt, chosen, rejected) triples")
    policy = recipe.build_model(cfg, tok, dtype)
    reference = copy.deepcopy(policy)
    reference.eval()
    for p in reference.parameters():
        p.stop_gradient = True
    recipe.log(STAGE, f"policy: {recipe.describe_model(policy)}; reference = frozen copy of the initial policy")
    beta = float(cfg.get("beta", 0.1))
    train_batches = batches(data, int(cfg.get("per_device_train_batch_size", 2)), int(cfg.get("max_steps", 10)))
    for b in train_batches:
        b["ref_logps"] = reference_logps(reference, b)
    if cfg.get("verify_against_eager") and cfg.get("flash_mask", True):
        recipe.check_against_eager(STAGE, policy, train_batches[0],
                                   lambda b: response_logps(policy, b).sum(), "summed answer log-probs")
    accs = []

    def step_loss(b):
        loss, acc = dpo_loss(policy, b, b["ref_logps"], beta)
        accs.append(float(acc))
        return loss

    summary = recipe.train(STAGE, cfg, policy.parameters(), train_batches, step_loss, lambda b: int(b["real_tokens"]))
    recipe.log(STAGE, f"reward accuracy (chosen margin > 0): first step {accs[0]:.2f}, last step {accs[-1]:.2f}")
    summary.update(stage=STAGE, config=cfg["_config_path"], flash_mask=bool(cfg.get("flash_mask", True)),
                   reward_accuracy_last=accs[-1], mask_png=str(out_dir / "mask_row0.png"))
    recipe.log(STAGE, f"summary: {recipe.write_summary(out_dir, summary)}")
    return summary


if __name__ == "__main__":
    main()
