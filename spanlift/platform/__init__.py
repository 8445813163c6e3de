"""The platform around the solvers: teacher cache, fitting, comparison (and later Ray and MLflow)."""
