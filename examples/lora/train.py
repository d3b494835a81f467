"""Multi-adapter LoRA with FlashMask: ``python examples/lora/train.py [--config examples/lora/config.yaml]``.

Each example belongs to an adapter (its ``task`` field). :func:`paddle_flashmask.mask_builders.pack_lora`
packs examples of all adapters into shared rows and returns per-token ``adapter_ids``; the LoRA
layers (on ``lora_target_modules`` of a frozen Llama) add ``B_a A_a x`` for each token's adapter
``a`` only, and the causal document mask keeps every example to itself. So one batch trains several
adapters at once with no cross-talk, and no padding between examples.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.common import recipe  # noqa: E402
from examples.sft.train import encode  # noqa: E402
from examples.sft.train import loss as sft_loss  # noqa: E402

STAGE = "lora"


class AdapterRouter:
    """Holds the current batch's per-token adapter ids ``[B, S]`` (-1: no adapter) for the LoRA layers."""
    adapter_ids = None


def make_multi_lora_linear(base, num_adapters: int, rank: int, alpha: float, router: AdapterRouter):
    import paddle

    class MultiLoRALinear(paddle.nn.Layer):
        """``base(x) + alpha/rank * B[a] A[a] x`` with ``a`` the token's adapter (B starts at 0)."""

        def __init__(self) -> None:
            super().__init__()
            self.base = base
            fan_in, fan_out = base.weight.shape          # paddle Linear weight: [in, out]
            self.lora_A = self.create_parameter(
                [num_adapters, fan_in, rank], default_initializer=paddle.nn.initializer.Normal(std=fan_in ** -0.5))
            self.lora_B = self.create_parameter(
                [num_adapters, rank, fan_out], default_initializer=paddle.nn.initializer.Constant(0.0))
            self.scale = alpha / rank

        def forward(self, x):
            y = self.base(x)
            ids = router.adapter_ids
            for a in range(num_adapters):
                route = (ids == a).unsqueeze(-1).astype(x.dtype)
                y = y + route * (paddle.matmul(paddle.matmul(x, self.lora_A[a]), self.lora_B[a]) * self.scale)
            return y

    return MultiLoRALinear()


def add_lora(model, cfg: dict, num_adapters: int, router: AdapterRouter) -> list:
    """Freeze ``model``, wrap the target projections; returns the LoRA parameters."""
    for p in model.parameters():
        p.stop_gradient = True
    targets = set(cfg.get("lora_target_modules", ["q_proj", "v_proj"]))
    params = []
    for layer in model.sublayers():
        for name in targets:
            base = getattr(layer, name, None)
            if base is not None and hasattr(base, "weight"):
                wrapped = make_multi_lora_linear(base, num_adapters, int(cfg.get("lora_rank", 8)),
                                                 float(cfg.get("lora_alpha", 16)), router)
                setattr(layer, name, wrapped)
                params += [wrapped.lora_A, wrapped.lora_B]
    if not params:
        raise ValueError(f"lora_target_modules: expected names of linear sublayers, found none of {sorted(targets)}")
    return params


def build_data(cfg: dict, tok) -> dict:
    from paddle_flashmask.mask_builders import pack_lora
    rows = recipe.load_jsonl(cfg["train_dataset_path"], cfg.get("max_examples"))
    names = sorted({r[cfg.get("adapter_key", "task")] for r in rows})
    adapter_of = {n: k for k, n in enumerate(names)}
    examples = encode(rows, tok, int(cfg["max_seq_len"]))
    pack = pack_lora([(len(x), adapter_of[r[cfg.get("adapter_key", "task")]]) for (x, _), r in zip(examples, rows)],
                     int(cfg["max_seq_len"]), greedy=bool(cfg.get("greedy_zero_padding", True)),
                     convention=cfg.get("mask_convention", "default"))
    b, s = pack.position_ids.shape
    input_ids = np.full((b, s), tok.pad_token_id, np.int64)
    labels = np.full((b, s), -100, np.int64)
    for n, (row, start, end) in enumerate(pack.spans):
        if row >= 0:
            input_ids[row, start:end] = examples[n][0]
            labels[row, start:end] = examples[n][1]
    return {"pack": pack, "adapters": names, "lengths": [len(x) for x, _ in examples], "input_ids": input_ids,
            "labels": labels, "position_ids": pack.position_ids, "adapter_ids": pack.adapter_ids,
            "attn_mask_startend_row_indices": pack.mask.startend_row_indices}


def batches(data: dict, rows_per_batch: int, steps: int) -> list[dict]:
    keys = ("input_ids", "labels", "position_ids", "adapter_ids", "attn_mask_startend_row_indices")
    real = data["pack"].example_ids >= 0
    return [recipe.to_tensors({**{k: data[k][sel] for k in keys}, "real_tokens": int(real[sel].sum())})
            for sel in recipe.row_batches(len(data["input_ids"]), rows_per_batch, steps)]


def main(argv=None) -> dict:
    cfg = recipe.parse_args(Path(__file__).with_name("config.yaml"), argv)
    out_dir = recipe.ROOT / cfg.get("output_dir", f"out/{STAGE}")
    device, dtype = recipe.setup_runtime(cfg)
    recipe.log(STAGE, f"config {cfg['_config_path']}: flash_mask={cfg.get('flash_mask')}, device={device}, dtype={dtype}")
    tok = recipe.build_tokenizer(cfg)
    data = build_data(cfg, tok)
    pack = data["pack"]
    mixed = sum(len(set(pack.adapter_ids[r][pack.adapter_ids[r] >= 0].tolist())) > 1 for r in range(len(pack.rows)))
    recipe.log(STAGE, f"data: {len(data['lengths'])} examples, adapters {data['adapters']}; packed with "
                      f"pack_lora into {len(pack.rows)} rows x {cfg['max_seq_len']} ({mixed} rows mix adapters)")
    recipe.report_mask(STAGE, pack.mask, [data["lengths"][n] for n in pack.rows[0]], out_dir, "documents")
    model = recipe.build_model(cfg, tok, dtype)
    router = AdapterRouter()
    params = add_lora(model, cfg, len(data["adapters"]), router)
    n_lora = sum(int(np.prod(p.shape)) for p in params)
    recipe.log(STAGE, f"model: {recipe.describe_model(model)}; frozen, {len(data['adapters'])} LoRA adapters "
                      f"(rank {cfg.get('lora_rank', 8)}) on {cfg.get('lora_target_modules')}: {n_lora} trainable params")

    def loss_fn(b):
        router.adapter_ids = b["adapter_ids"]
        return sft_loss(model, b)

    train_batches = batches(data, int(cfg.get("per_device_train_batch_size", 2)), int(cfg.get("max_steps", 10)))
    if cfg.get("verify_against_eager") and cfg.get("flash_mask", True):
        recipe.check_against_eager(STAGE, model, train_batches[0], loss_fn)
    summary = recipe.train(STAGE, cfg, params, train_batches, loss_fn, lambda b: int(b["real_tokens"]))
    summary.update(stage=STAGE, config=cfg["_config_path"], flash_mask=bool(cfg.get("flash_mask", True)),
                   adapters=data["adapters"], mask_png=str(out_dir / "mask_row0.png"))
    recipe.log(STAGE, f"summary: {recipe.write_summary(out_dir, summary)}")
    return summary


if __name__ == "__main__":
    main()
