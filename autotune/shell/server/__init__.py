"""Starting, checking and stopping vLLM deployments: processes, keys, installs, GPUs."""
