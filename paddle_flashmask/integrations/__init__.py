"""Framework integrations (import the one you need; each imports its framework lazily).

* :mod:`paddle_flashmask.integrations.paddlenlp` — ``patch_paddlenlp()`` / ``unpatch_paddlenlp()``,
  ``apply_flash_mask_flag(cfg)``;
* :mod:`paddle_flashmask.integrations.paddleformers` — ``register_paddleformers()`` (the
  ``flashmask`` attention backend), ``configure_model_config(config)``;
* :mod:`paddle_flashmask.integrations.transformers` — ``register_transformers()``
  (``attn_implementation="paddle_fmask"``).

See docs/integrations.md.
"""
