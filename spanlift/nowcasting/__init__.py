"""Precipitation nowcasting: SEVIR radar data in xarray, synthetic storms in SEVIR's own layout,
SEVIR-LR windows and the skill scores of PreDiff and Earthformer. Knows nothing of Ray or MLflow.
"""
