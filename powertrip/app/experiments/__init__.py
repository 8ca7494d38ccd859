"""Experiments: the embedded deployment (all four services as local processes) and the
run / compare / sweep drivers built on it."""
