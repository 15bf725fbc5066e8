"""Shared mathematics: intervals and pooled noise, Pareto fronts and knees. Pure."""
