"""Metrics: the registry of metric records, per-run summaries as vLLM's benchmark computes them,
server-sent events, Prometheus text and SLO limits. Pure."""
