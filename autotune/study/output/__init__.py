"""What a study hands back: dashboard notes, exported flags, the report and its plots."""
