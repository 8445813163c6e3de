"""The metric histories a fitted run records, by name: what the leaderboard's curves read back.

loss         the training loss, one point per iteration
val_loss     the validation loss, at each validation (step: the iteration; 0 before the first
             update)
fit.seconds  at the same steps, the seconds since the whole fit started (a two-stage fit's
             base fit first); runs recorded before it have none
"""

TRAIN_HISTORY = "loss"
VALIDATION_HISTORY = "val_loss"
SECONDS_HISTORY = "fit.seconds"
