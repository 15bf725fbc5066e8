"""What a study was asked to do and the rules that run it: the study's request, the time budget,
the confirmation's schedule, scheduling, a trial's context. Pure."""
