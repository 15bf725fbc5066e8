"""One deployment: configuration to vLLM flags, device slots, failure classes and start-up phases
read from vLLM's log. Pure."""
