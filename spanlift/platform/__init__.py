"""The platform around the solvers, grouped by role:

fitting/     teacher cache, endpoint teacher matching, losses, comparison (no Ray)
sweep/       the sweep on Ray: YAML schema, Tune driver, trial, Ray Train worker, teacher pass
tracking/    MLflow runs and the leaderboard over them
evaluation/  evaluator actors and mergeable metrics (FID, LPIPS, ImageReward, latency)
analysis/    the paper's analyses, `spanlift analyze` (Halvorsen, chord ratio, out-of-span)
ray_runtime  starting or joining Ray, shared by sweeps and `spanlift eval`
"""
