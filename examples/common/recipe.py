"""Shared recipe machinery: config + CLI, runtime, tokenizer, model, data, training loop, reporting.

Every recipe (examples/{sft,dpo,rm,lora}/train.py) is ``config.yaml`` + this module + a small
stage-specific part (how examples become packed rows, and the loss). Models are PaddleFormers'
Llama classes: a tiny random-weight Llama from ``tiny_model`` when ``model_name_or_path`` is null
(CPU, seconds), or a real checkpoint (``--model_name_or_path``, GPU if present).

The trainer-config flag ``flash_mask: true`` is what turns FlashMask on, as in PaddleNLP recipes:
the data pipeline emits ``attn_mask_startend_row_indices`` through paddle_flashmask's builders
and the model's attention is PaddleFormers' ``flashmask`` backend, which
:mod:`paddle_flashmask.integrations.paddleformers` points at ``paddle_flashmask.flashmask_attention``.
``flash_mask: false`` keeps the same indices but selects PaddleFormers' ``eager`` attention, which
rebuilds a dense [S, S] mask from them (the baseline FlashMask replaces).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:           # run from a checkout without installing the package
    sys.path.insert(0, str(ROOT))

from examples.common.tokenizer import ByteTokenizer, PretrainedTokenizer  # noqa: E402


# --------------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------------

def _parse_value(text: str) -> Any:
    import yaml
    return yaml.safe_load(text)


def load_config(path: os.PathLike, overrides: Iterable[str] = ()) -> dict:
    """YAML config + ``key=value`` overrides (values parsed as YAML: ``max_steps=5``, ``flash_mask=false``)."""
    import yaml
    with open(path) as f:
        cfg = yaml.safe_load(f) or {}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"--set: expected key=value, found {item!r}")
        key, value = item.split("=", 1)
        cfg[key.strip()] = _parse_value(value)
    cfg["_config_path"] = str(path)
    return cfg


def parse_args(default_config: Path, argv: Optional[list[str]] = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=str(default_config), help="YAML config (default: %(default)s)")
    p.add_argument("--model_name_or_path", help="real checkpoint instead of the tiny random Llama")
    p.add_argument("--max_steps", type=int)
    p.add_argument("--device", help="auto | cpu | gpu | gpu:N")
    p.add_argument("--output_dir")
    p.add_argument("--flash_mask", choices=["true", "false"])
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any config key")
    a = p.parse_args(argv)
    cfg = load_config(a.config, a.set)
    for key in ("model_name_or_path", "max_steps", "device", "output_dir"):
        if getattr(a, key) is not None:
            cfg[key] = getattr(a, key)
    if a.flash_mask is not None:
        cfg["flash_mask"] = a.flash_mask == "true"
    return cfg


def log(stage: str, msg: str) -> None:
    print(f"[{stage}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------------
# Runtime, tokenizer, model
# --------------------------------------------------------------------------------------------------

def quiet_framework_logs() -> None:
    """Drop import-time chatter that says nothing about the run (ccache, distutils, torch-less transformers)."""
    import warnings
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for text in ("No ccache found", "Setuptools is replacing distutils"):
        warnings.filterwarnings("ignore", message=text)


def setup_runtime(cfg: dict) -> tuple[str, str]:
    """Pick the device and dtype (``auto``: GPU + bfloat16 when Paddle has CUDA, else CPU + float32)."""
    quiet_framework_logs()
    import paddle
    device = str(cfg.get("device", "auto"))
    if device == "auto":
        device = "gpu" if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0 else "cpu"
    paddle.set_device(device)
    dtype = str(cfg.get("dtype", "auto"))
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "bfloat16"
    paddle.seed(int(cfg.get("seed", 42)))
    np.random.seed(int(cfg.get("seed", 42)))
    return device, dtype


def build_tokenizer(cfg: dict):
    """The bundled byte tokenizer (no model path, or ``tokenizer_name_or_path: byte``), else the checkpoint's."""
    path = cfg.get("tokenizer_name_or_path") or cfg.get("model_name_or_path")
    if not path or path == "byte":
        return ByteTokenizer()
    from paddleformers.transformers import AutoTokenizer
    return PretrainedTokenizer(AutoTokenizer.from_pretrained(path))


def configure_attention(model_config, cfg: dict) -> str:
    """Apply the ``flash_mask`` flag to a PaddleFormers config; returns the attention in use."""
    from paddle_flashmask.integrations.paddleformers import configure_model_config
    configure_model_config(model_config, flash_mask=bool(cfg.get("flash_mask", True)))
    if not cfg.get("flash_mask", True):
        model_config._attn_implementation = cfg.get("attn_impl_without_flash_mask", "eager")
    if cfg.get("_attn_implementation"):        # PaddleFormers CLI spelling wins when given
        model_config._attn_implementation = cfg["_attn_implementation"]
    return model_config._attn_implementation


def build_model(cfg: dict, tokenizer, dtype: str):
    """PaddleFormers ``LlamaForCausalLM``: tiny random init, or ``from_pretrained(model_name_or_path)``."""
    import paddle
    from paddleformers.transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    from paddleformers.utils.log import logger as pf_logger
    pf_logger.set_level(str(cfg.get("paddleformers_log_level", "WARNING")))
    path = cfg.get("model_name_or_path")
    if path:
        model_config = AutoConfig.from_pretrained(path)
        configure_attention(model_config, cfg)
        model = AutoModelForCausalLM.from_pretrained(path, config=model_config, dtype=dtype)
    else:
        tiny = dict(cfg.get("tiny_model", {}))
        model_config = LlamaConfig(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id,
                                   bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                   max_position_embeddings=max(int(cfg["max_seq_len"]), 64), **tiny)
        configure_attention(model_config, cfg)
        paddle.seed(int(cfg.get("seed", 42)))
        model = LlamaForCausalLM(model_config)
        if dtype != "float32":
            model = model.to(dtype=dtype)
    model.train()
    return model


def describe_model(model) -> str:
    cfg = model.config
    n = sum(int(np.prod(p.shape)) for p in model.parameters())
    return (f"{type(model).__name__} ({cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
            f"{cfg.num_attention_heads} heads / {cfg.num_key_value_heads} kv heads, {n / 1e6:.2f}M params, "
            f"_attn_implementation={cfg._attn_implementation!r})")


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------

def load_jsonl(path: os.PathLike, limit: Optional[int] = None) -> list[dict]:
    path = Path(path)
    if not path.is_absolute():
        path = ROOT / path
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return rows[:limit] if limit else rows


def to_tensors(batch: dict) -> dict:
    """numpy batch -> paddle tensors (indices int32, ids int64, the rest as they are)."""
    import paddle
    out = {}
    for k, v in batch.items():
        if isinstance(v, np.ndarray):
            dtype = "int32" if k == "attn_mask_startend_row_indices" else None
            out[k] = paddle.to_tensor(v, dtype=dtype) if dtype else paddle.to_tensor(v)
        else:
            out[k] = v
    return out


def row_batches(num_rows: int, rows_per_batch: int, steps: int) -> list[np.ndarray]:
    """Row selections for ``steps`` batches, cycling over the packed rows in order."""
    order = np.arange(num_rows)
    return [np.take(order, range(s * rows_per_batch, (s + 1) * rows_per_batch), mode="wrap")
            for s in range(steps)]


def run_lengths(values: np.ndarray) -> list[tuple[int, int]]:
    """[(value, count), ...] of consecutive equal values — how an LTS row reads."""
    out: list[list[int]] = []
    for v in values.tolist():
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return [(a, b) for a, b in out]


def report_mask(stage: str, mask, doc_lens: list[int], out_dir: Path, what: str) -> str:
    """Print row 0's documents and index runs, render its PNG; returns the PNG path."""
    from paddle_flashmask.mask_builders import render
    idx = mask.startend_row_indices[0, 0, :, 0]
    runs = run_lengths(idx)
    shown = ", ".join(f"{v}x{n}" for v, n in runs[:8]) + (" ..." if len(runs) > 8 else "")
    log(stage, f"row 0: {what} {doc_lens} -> startend_row_indices[0, 0, :, 0] (value x count) = {shown}")
    out_dir.mkdir(parents=True, exist_ok=True)
    png = render(mask, out_dir / "mask_row0.png", batch=0)
    log(stage, f"mask of row 0 rendered (paddle_flashmask.mask_builders.render): {png}")
    return png


# --------------------------------------------------------------------------------------------------
# Model calls and losses
# --------------------------------------------------------------------------------------------------

def model_logits(model, batch: dict):
    """fp32 logits ``[B, S, V]`` of a PaddleFormers causal LM for a packed batch."""
    out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                attn_mask_startend_row_indices=batch["attn_mask_startend_row_indices"])
    logits = out.logits if hasattr(out, "logits") else out[0] if isinstance(out, (tuple, list)) else out
    return logits.astype("float32")


def token_logps(logits, labels):
    """log p(label) per position ``[B, S]`` (0 where label == -100) and the 0/1 label mask."""
    import paddle
    import paddle.nn.functional as F
    valid = (labels != -100)
    safe = paddle.where(valid, labels, paddle.zeros_like(labels))
    logp = F.log_softmax(logits, axis=-1)
    picked = paddle.take_along_axis(logp, safe.unsqueeze(-1), axis=-1).squeeze(-1)
    mask = valid.astype("float32")
    return picked * mask, mask


# --------------------------------------------------------------------------------------------------
# Training loop
# --------------------------------------------------------------------------------------------------

def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, unit="step", dynamic_ncols=False, ncols=100,
                    file=sys.stdout, mininterval=0.5)
    except ImportError:  # pragma: no cover - tqdm is in the recommended install
        class _Plain:
            def __init__(self): self.n = 0
            def update(self, k=1):
                self.n += k
                print(f"{desc}: step {self.n}/{total} {getattr(self, 'post', '')}", flush=True)
            def set_postfix_str(self, s): self.post = s
            def close(self): pass
        return _Plain()


def attention_backend_used() -> str:
    from paddle_flashmask.ops.backend import last_backend
    return str(last_backend())


def train(stage: str, cfg: dict, params, batches: list[dict], loss_fn: Callable[[dict], Any],
          tokens_of: Callable[[dict], int]) -> dict:
    """AdamW over ``params`` for ``len(batches)`` steps with a progress bar; returns a summary."""
    import paddle
    opt = paddle.optimizer.AdamW(learning_rate=float(cfg.get("learning_rate", 1e-3)), parameters=params,
                                 weight_decay=float(cfg.get("weight_decay", 0.0)),
                                 grad_clip=paddle.nn.ClipGradByGlobalNorm(float(cfg.get("max_grad_norm", 1.0))))
    bar = _progress(len(batches), f"[{stage}] train")
    losses, tokens, t0 = [], 0, time.perf_counter()
    for step, batch in enumerate(batches):
        loss = loss_fn(batch)
        loss.backward()
        if step == 0:
            grads = [p.grad for p in params if p.grad is not None]
            grad_norm = math.sqrt(sum(float((g.astype("float32") ** 2).sum()) for g in grads))
            first = (f"step 1 forward+backward through paddle_flashmask.flashmask_attention "
                     f"(backend={attention_backend_used()}): loss {float(loss):.4f}, "
                     f"{len(grads)} parameter grads, grad norm {grad_norm:.4f}")
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
        tokens += tokens_of(batch)
        dt = time.perf_counter() - t0
        bar.set_postfix_str(f"loss {losses[-1]:.4f} | {tokens / max(dt, 1e-9):,.0f} tok/s")
        bar.update(1)
        if step == 0 and cfg.get("flash_mask", True):
            bar.write(f"[{stage}] {first}") if hasattr(bar, "write") else print(f"[{stage}] {first}")
    bar.close()
    dt = time.perf_counter() - t0
    summary = {"steps": len(batches), "first_loss": losses[0], "last_loss": losses[-1],
               "tokens": tokens, "seconds": dt, "tokens_per_s": tokens / max(dt, 1e-9)}
    log(stage, f"done: {summary['steps']} steps, loss {summary['first_loss']:.4f} -> {summary['last_loss']:.4f}, "
               f"{tokens} tokens in {dt:.1f} s ({summary['tokens_per_s']:,.0f} tokens/s)")
    return summary


def write_summary(out_dir: Path, summary: dict) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=2))
    return path


class attention_implementation:
    """Context manager: run a PaddleFormers model with another ``_attn_implementation`` for a while."""

    def __init__(self, model, name: str) -> None:
        self.configs = {id(layer.config): layer.config for layer in model.sublayers(include_self=True)
                        if getattr(layer, "config", None) is not None}
        self.name = name
        self.saved: dict[int, str] = {}

    def __enter__(self):
        for key, c in self.configs.items():
            self.saved[key] = c._attn_implementation
            c._attn_implementation = self.name
        return self

    def __exit__(self, *exc):
        for key, c in self.configs.items():
            c._attn_implementation = self.saved[key]
        return False


def check_against_eager(stage: str, model, batch: dict, loss_fn: Callable[[dict], Any],
                        what: str = "loss") -> float:
    """Loss of ``batch`` with our attention vs PaddleFormers' eager dense-mask attention (no grad)."""
    import paddle
    with paddle.no_grad():
        ours = float(loss_fn(batch))
        with attention_implementation(model, "eager"):
            dense = float(loss_fn(batch))
    rel = abs(ours - dense) / max(abs(dense), 1e-12)
    log(stage, f"check: {what} with paddle_flashmask {ours:.6f} vs PaddleFormers eager dense mask "
               f"{dense:.6f} (rel diff {rel:.1e})")
    return rel
