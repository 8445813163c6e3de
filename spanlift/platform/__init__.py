"""The platform around the solvers, grouped by role:

sampling/      noise from seeds, rollouts, teacher cache, scores against the teacher, sample grids
detectors/     FID detectors (Inception, digits) and the image protocol they read
fitting/       endpoint teacher matching, losses, comparison (no Ray)
evaluation/    evaluator actors and mergeable metrics (FID, LPIPS, ImageReward, latency)
sweep/         the sweep on Ray: YAML schema, Tune driver, trial, Ray Train worker, teacher pass
tracking/      MLflow runs and the leaderboard over them
analysis/      the paper's analyses, `spanlift analyze` (Halvorsen, chord ratio, out-of-span)
nowcast_suite  the nowcasting suite, `spanlift nowcast eval` (fits, then evaluates)
ray_runtime    starting or joining Ray, shared by sweeps and `spanlift eval`

Imports point down this list's layers: sampling and detectors import neither fitting nor
evaluation, and fitting and evaluation do not import each other.
"""
