"""One trial: objectives, the capacity search, racing, the verdict told to the sampler, and the
trial's outcome record. Pure."""
