"""Workloads: profiles, the request records the client sends, the dataset formats that make them,
and a capacity profile's load axis. Pure."""
