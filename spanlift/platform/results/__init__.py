"""A configuration's result, one way for every command that produces one.

    key          configuration.py: `Configuration` (fit key, run key), `teacher_identity`
    fit cache    fit_cache.py: fitted checkpoints by fit key and code version, base first
    evaluators   evaluation/pool.py: `evaluators_on_ray`, actors over the CPUs (and GPUs) free
    tracking     tracking.py: the experiment, a run's params and tags, recording a result

`spanlift sweep` (a trial), `spanlift eval`, `spanlift nowcast eval` and `spanlift fit`/`compare`
all go through these.
"""
