"""What a study was asked to do and the rules that run it: the plan request, the time budget,
the confirmation's plan, scheduling. Pure."""
