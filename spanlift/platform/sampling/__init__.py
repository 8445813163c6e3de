"""Sampling: what fitting and evaluation both draw on, importing neither.

rollout      noise from seeds, a solver's endpoint from noise
teacher      teacher endpoints from seeds, cached by content hash
score        a solver against a teacher set: endpoint RMSE, latency, sample images
sample_grid  a PNG of samples, one row per solver
"""
