"""Search spaces: the model facts a space needs, parameters and references as records, and their
YAML. Pure."""
