"""Fitting without Ray: the teacher cache, endpoint teacher matching, losses, comparison tables."""
