"""spanlift: few-step ODE solvers for frozen diffusion and flow-matching models."""

__version__ = "0.1.0"
