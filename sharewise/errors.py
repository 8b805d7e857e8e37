"""Named errors raised by the library; only the CLI turns them into exit codes."""


class SharewiseError(Exception):
    """Base class: a user-facing problem; the message says what was expected, what was got, how to fix it."""


class UnknownWorkloadError(SharewiseError, KeyError):
    """A workload name or spec that resolves to nothing."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class WorkloadContractError(SharewiseError, TypeError):
    """A user workload that does not follow the ``Workload`` contract."""


class SchemaError(SharewiseError, ValueError):
    """A table (Parquet, CSV) whose columns or values do not match the schema."""


class DatasetError(SharewiseError, ValueError):
    """A dataset folder that is missing, empty or unusable."""


class PublicDataNotFoundError(SharewiseError, FileNotFoundError):
    """The public data (Gavel, Philly, PAL) is not where sharewise looks: an installed wheel carries none."""


class DatasetLockedError(SharewiseError, RuntimeError):
    """Another campaign holds the dataset folder's lock."""


class DeviceError(SharewiseError, RuntimeError):
    """A device that is not present or cannot be used as asked."""


class MPSUnavailableError(DeviceError):
    """NVIDIA MPS was asked for but cannot be used on this machine."""


class ModelSchemaError(SharewiseError, ValueError):
    """A model file of another schema version, or with other features than the data."""


class NotFittedError(SharewiseError, ValueError):
    """An estimator used before ``fit``."""


class TraceError(SharewiseError, ValueError):
    """A job trace or queue file that cannot be replayed."""


class ConfigError(SharewiseError, ValueError):
    """An option value out of range or inconsistent with another."""


class MissingDependencyError(SharewiseError, ImportError):
    """An optional dependency (Ray, XGBoost, pynvml) is not installed."""


class UnknownRateError(SharewiseError, ValueError):
    """A job whose work or rate of progress is not a finite positive number: a run holding it could never end."""


class InvalidPlacementError(SharewiseError, RuntimeError):
    """A policy returned a placement the cluster cannot run (a bug in the policy, not in the user's input)."""


class ProfileFailed(SharewiseError, RuntimeError):
    """A solo profile whose workload failed, ran out of memory or timed out; ``status`` says which."""

    def __init__(self, status: str, error: str) -> None:
        super().__init__(f"profiling failed ({status}): {error}")
        self.status = status
        self.error = error
