"""The paper's analyses, each a command `spanlift analyze <analysis>` writing a PNG and a CSV:

    halvorsen     the linear-span limitation on a 3D ODE (paper, Sec. "Linear span limitation")
    ratio         ‖P⊥_c β_iΔ_op‖ / ‖P⊥_c α_iΔ_base‖ per step, c the teacher chord (Analyses)
    out-of-span   ‖P⊥_i Δ_i‖ / ‖Δ_i‖ per step for any solver (Table "out-of-span ratio")

Every per-step analysis reads the solver's own rollout (`evaluation.metrics.diagnostics.rollout`).
"""
