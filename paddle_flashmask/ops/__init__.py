"""Attention backends: ``reference`` (exact, framework ops) and ``cute`` (SM90 CuTe DSL kernels).

``backend`` picks one per call; the frontends are the only callers.
"""
