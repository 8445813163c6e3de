"""User-facing errors: each carries one message that names the bad value and what was expected.

The command line prints these without a traceback; anything else is a bug and keeps its traceback.
"""


class SpanliftError(Exception):
    """An error caused by the user's input, files or settings."""


class UnknownNameError(SpanliftError):
    """A registry lookup with a name that is not registered."""


class UnreachableNFEError(SpanliftError):
    """An NFE budget that a solver cannot spend exactly."""


class CheckpointError(SpanliftError):
    """A checkpoint file that is missing, unreadable or for another solver."""


class CacheError(SpanliftError):
    """A teacher cache that is missing, incomplete or fails verification."""


class TrainingDivergedError(SpanliftError):
    """A fit whose loss or parameters became NaN or infinite."""


class SettingsError(SpanliftError):
    """A setting with a value outside what it accepts."""


class OptionError(SettingsError):
    """A plug-in's option (a searcher's, a metric's) with a value it does not take: `key`, the
    value, and what was expected, or `reason` where there is more to say."""

    def __init__(self, key: str, value: object, expected: str, reason: str = "") -> None:
        self.key, self.value, self.expected = key, value, expected
        self.detail = reason or f"expected {expected}, got {value!r}"
        super().__init__(f"{key}: {self.detail}")


class MetricUnavailable(SpanliftError):
    """A metric that cannot be computed here (its weights are absent); the message says why and
    how to enable it. Evaluations report such a metric as unavailable instead of failing."""


class DataError(SpanliftError):
    """A data file or folder (SEVIR catalog, HDF5, a prepared store) that is missing, of the
    wrong layout or of another schema version."""


class ReferenceStatisticsError(SpanliftError):
    """An FID reference-statistics file (NVlabs' published `.npz` or spanlift's own) that is
    missing, unreadable, or made for another detector or image resolution."""
