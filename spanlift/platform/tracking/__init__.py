"""Tracking: one MLflow run per evaluated configuration, and the leaderboard that queries them."""
