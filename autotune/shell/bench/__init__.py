"""Benchmark I/O: the streaming client, server metrics, workloads and input files."""
