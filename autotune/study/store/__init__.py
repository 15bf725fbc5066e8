"""A study's storage: Optuna storages, the study's own attributes, trials to and from records,
imports."""
