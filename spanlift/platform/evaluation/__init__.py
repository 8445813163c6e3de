"""Evaluation: detectors, image protocol and mergeable metric states (FID's feature moments)."""
