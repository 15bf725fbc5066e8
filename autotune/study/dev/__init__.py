"""Developer tools over a study: recorded tables replayed as trial functions."""
