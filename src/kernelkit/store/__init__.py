"""The results store (db.py: runs and case results in one SQLite file) and run-to-run comparison (compare.py)."""

from kernelkit.store.compare import (
    DEFAULT_MIN_EFFECT,
    CaseChange,
    EnvDiff,
    RunComparison,
    compare,
    env_diffs,
    regressions,
)
from kernelkit.store.db import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    RunInfo,
    Store,
    StoreError,
    default_store_path,
)

__all__ = ["APPLICATION_ID", "DEFAULT_MIN_EFFECT", "SCHEMA_VERSION", "CaseChange", "EnvDiff", "RunComparison",
           "RunInfo", "Store", "StoreError", "compare", "default_store_path", "env_diffs", "regressions"]
